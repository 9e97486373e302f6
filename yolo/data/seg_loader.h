// The instance-segmentation batch loader: data::Loader's workers, order and options
// (loader.h) over SegAugmentPipeline's samples, collated as the reference's
// LoadImagesAndLabelsAndMasks.collate_fn stacks them. As there, 1 or 8 workers give identical
// batches, and images (u8 NHWC RGB), targets and masks are pinned when CUDA is available.
//
//   SegLoader loader(pipeline, options, order);
//   loader.start_epoch(epoch);
//   while (std::optional<SegBatch> b = loader.next()) { ... }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "yolo/data/loader.h"
#include "yolo/data/ordered_batches.h"
#include "yolo/data/seg_pipeline.h"

namespace kestrel::yolo::data {

struct SegBatch {
  int64_t index = 0;
  Tensor images;   // u8 [B, H, W, 3] RGB (pinned when CUDA available), as Batch
  Tensor targets;  // f32 [M, 6]: image, class, x, y, w, h normalised, as Batch
  // overlap: f32 [B, H/r, W/r], pixel = 1-based index of the instance within its image's
  // targets rows (0 = background), as the reference's collate stacks them;
  // without overlap: f32 [M, H/r, W/r], one 0/1 mask per targets row, in targets' order.
  Tensor masks;
  bool overlap = true;
  std::vector<std::string> paths;
  std::vector<std::optional<SampleShapes>> shapes;
  int64_t size() const { return static_cast<int64_t>(paths.size()); }
};

class SegLoader {
 public:
  // options.quad is refused: the reference has no quad collate for masks.
  SegLoader(std::shared_ptr<const SegAugmentPipeline> pipeline, LoaderOptions options, EpochOrder order);
  ~SegLoader();  // stops and joins the workers, also in the middle of an epoch
  SegLoader(const SegLoader&) = delete;
  SegLoader& operator=(const SegLoader&) = delete;

  // As Loader's: batches per epoch, start (or continue) an epoch, the next batch in order (a
  // worker's failure is thrown here as kestrel::Error naming the file), and one batch built on
  // the calling thread.
  int64_t len() const { return plan_.len(); }
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  std::optional<SegBatch> next();
  SegBatch build_batch(int64_t epoch, int64_t b) const;

 private:
  std::optional<SegBatch> build(int64_t b, const std::vector<int64_t>& samples, int64_t epoch,
                                const std::vector<int64_t>& partners, const std::function<bool()>& cancelled,
                                LoadBuffers* buffers) const;

  std::shared_ptr<const SegAugmentPipeline> pipeline_;
  LoaderOptions options_;
  BatchPlan plan_;
  bool pinned_ = false;

  using Batches = OrderedBatches<SegBatch, LoadBuffers, EpochPlan>;
  std::unique_ptr<Batches> batches_;  // last: its workers stop before the members above go
};

}  // namespace kestrel::yolo::data
