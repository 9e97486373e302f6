// The multi-threaded batch loader: `workers` threads each build whole batches (decode, augment,
// collate) into a bounded window of batches ahead of the consumer; batches come out in sampler
// order whatever the threads' timing, and each sample's randomness depends only on
// (seed, rank, epoch, index), so 1 or 8 workers give identical batches. Images are u8 NHWC RGB in
// pinned host memory when CUDA is available; BatchUploader (batch_uploader.h) moves them to the GPU
// on a copy stream (normalisation to float happens there: ops::images_to_input).
//
//   Loader loader(pipeline, options, order);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     while (std::optional<Batch> b = loader.next()) { ... }
//   }
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/stream.h"
#include "engine/tensor.h"
#include "yolo/data/augment_pipeline.h"
#include "yolo/data/ordered_batches.h"
#include "yolo/data/sampler.h"

namespace kestrel::yolo::data {

struct Batch {
  int64_t index = 0;  // batch number within the epoch
  Tensor images;      // u8 [B, H, W, 3] RGB; pinned host memory when CUDA is available
  Tensor targets;     // f32 [M, 6]: image index in the batch, class, x, y, w, h (normalised)
  std::vector<std::string> paths;
  // Per image, for mapping boxes back to the original (absent for mosaics).
  std::vector<std::optional<SampleShapes>> shapes;
  int64_t size() const { return static_cast<int64_t>(paths.size()); }
};

// An epoch's order and mosaic partners (empty: any image), shared by its batches' builds.
struct EpochPlan {
  std::vector<int64_t> order;
  std::vector<int64_t> partners;
};

// Which dataset indices an epoch visits, in order (this rank's share): a fixed count per epoch
// and the indices of a given epoch (e.g. a distributed sampler's after set_epoch).
struct EpochOrder {
  int64_t samples = 0;
  std::function<std::vector<int64_t>(int64_t epoch)> indices;
  // Where mosaic partners come from in an epoch (--image-weights: the epoch's weighted draw);
  // unset: any image of the dataset.
  std::function<std::vector<int64_t>(int64_t epoch)> partners;
};
// 0, 1, ..., n - 1 every epoch (validation).
EpochOrder sequential_order(int64_t n);
// The sampler's share for each epoch (set_epoch on a copy, so the order is safe to call from
// any thread).
EpochOrder distributed_order(const DistributedSampler& sampler);

// The reference's create_dataloader worker count: min(cores / local ranks, batch, workers), where
// batch is min(batch_size, dataset_size) and counts as 0 when it is 1 (one image per batch is
// loaded on the consumer's thread). The reference divides the cores by the machine's GPU count,
// which is the number of local ranks in its DDP runs.
int dataloader_workers(int cores, int local_ranks, int64_t batch_size, int64_t dataset_size, int workers);

struct LoaderOptions {
  int batch_size = 16;
  int workers = 8;   // 0: batches are built on the consumer's thread, inside next()
  int prefetch = 2;  // ready batches allowed ahead of the consumer beyond one per worker
  uint64_t seed = 0;
  int rank = 0;
  // Pinned host batches (asynchronous uploads); only honoured when a CUDA device is present.
  bool pin_memory = true;
  // The CUDA device worker threads make current (-1: leave the default), so that their pinned
  // allocations do not create a context on GPU 0 for a rank that computes on another GPU.
  int cuda_device = -1;
  // --quad: each batch goes through quad_collate (quad_collate.h); batch_size must then be a
  // multiple of 4, and a last batch of fewer than 4 images is dropped (len() leaves it out).
  bool quad = false;
};

// Which dataset indices each batch of an epoch holds: the epoch's order (checked against the
// dataset) cut into batch_size pieces. Shared by the detection and segmentation loaders.
class BatchPlan {
 public:
  // `what` names the loader in errors.
  BatchPlan(EpochOrder order, const LoaderOptions& options, int64_t dataset_size, std::string what);
  // Batches per epoch (the last one may be short; with quad, one of fewer than 4 images is dropped).
  int64_t len() const;
  // The epoch's order, checked: the promised count, every index inside the dataset.
  std::vector<int64_t> order(int64_t epoch) const;
  // The epoch's mosaic partners (empty: any image).
  std::vector<int64_t> partners(int64_t epoch) const;
  // The dataset indices of batch b of an epoch's order.
  std::vector<int64_t> batch(const std::vector<int64_t>& order, int64_t b) const;

 private:
  EpochOrder order_;
  int batch_size_;
  bool quad_;
  int64_t dataset_size_;
  std::string what_;
};

// The (height, width) every sample of batch b has: rectangular batches need the dataset's own
// order, and an error names two images of different shapes.
std::array<int, 2> batch_shape(const AugmentPipeline& pipeline, const std::vector<int64_t>& samples, int64_t b);

// f32 [M, 6] targets: each image's labels in turn, as rows (image index, class, x, y, w, h).
Tensor collate_targets(const std::vector<const std::vector<LabelBox>*>& labels, bool pinned);

class Loader {
 public:
  Loader(std::shared_ptr<const AugmentPipeline> pipeline, LoaderOptions options, EpochOrder order);
  ~Loader();  // stops and joins the workers, also in the middle of an epoch
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Batches per epoch (the last one may be short; with quad, one of fewer than 4 images is dropped).
  int64_t len() const;
  // Begins an epoch (abandoning what is left of the previous one) and sets the workers going.
  // first_batch > 0 continues an interrupted epoch: batches come out from that index on, exactly
  // as they would have in the uninterrupted epoch (a sample's randomness depends only on
  // seed, rank, epoch and index).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch in order, or nullopt when the epoch is done. A failure in a worker (e.g. an
  // unreadable image) is thrown here as kestrel::Error naming the file; the epoch then ends.
  std::optional<Batch> next();

  // Builds batch `b` of `epoch` on the calling thread, as a worker would (independent of any
  // running epoch).
  Batch build_batch(int64_t epoch, int64_t b) const;

 private:
  // Batch b from the dataset indices it holds; nullopt when `cancelled` turned true on the way.
  // `buffers`: the building thread's own decode memory (image_io.h), or null for fresh memory.
  std::optional<Batch> build(int64_t b, const std::vector<int64_t>& samples, int64_t epoch,
                             const std::vector<int64_t>& partners, const std::function<bool()>& cancelled,
                             LoadBuffers* buffers) const;

  std::shared_ptr<const AugmentPipeline> pipeline_;
  LoaderOptions options_;
  BatchPlan plan_;
  bool pinned_ = false;

  using Batches = OrderedBatches<Batch, LoadBuffers, EpochPlan>;
  std::unique_ptr<Batches> batches_;  // last: its workers stop before the members above go
};

}  // namespace kestrel::yolo::data
