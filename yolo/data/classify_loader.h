// The classification batch loader, as the reference's create_classification_dataloader: batches of
// min(batch_size, dataset size) samples (the last one short), the training split augmented
// (classify_transforms.h) and the evaluation split centre-cropped, both normalised on the host.
// `workers` threads each build whole batches ahead of the consumer; batches come out in order, and
// a sample depends only on (seed, rank, epoch, index) (sample_generator, augment_pipeline.h), so 1
// or 8 workers give identical batches.
//
// The order of an epoch: with shuffle, a permutation drawn from (seed, epoch); without, the
// dataset's order. With world > 1 it is torch's DistributedSampler: padded to a multiple of the
// world by repeating its start, rank r taking positions r, r + world, ... (sampler.h).
//
//   ClassifyLoader loader(dataset.train.samples, options);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     while (std::optional<ClassifyBatch> b = loader.next()) { ... }
//   }
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/tensor.h"
#include "yolo/data/classify_cache.h"
#include "yolo/data/classify_dataset.h"
#include "yolo/data/ordered_batches.h"

namespace kestrel::yolo::data {

struct ClassifyBatch {
  int64_t index = 0;             // batch number within the epoch
  Tensor images;                 // float32 (B, size, size, 3) NHWC RGB normalised, on the host
  std::vector<int64_t> labels;   // class per image
  std::vector<int> indices;      // dataset index per image
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

struct ClassifyLoaderOptions {
  int size = 224;            // --imgsz: the square side of every image
  int batch_size = 16;       // per rank; capped at the dataset's size
  bool augment = false;      // train: RandomResizedCrop, flip, jitter; else the centre crop
  bool shuffle = false;      // a new permutation every epoch
  int rank = 0, world = 1;   // DistributedSampler's share when world > 1
  int workers = 0;           // 0: batches are built on the consumer's thread, inside next()
  int prefetch = 2;          // ready batches allowed ahead of the consumer beyond one per worker
  uint64_t seed = 0;
  ClassifyCacheMode cache = ClassifyCacheMode::None;
  bool pin_memory = false;   // pinned host batches; only honoured when a CUDA device is present
  int cuda_device = -1;      // the device worker threads make current (pinned allocations)
};

class ClassifyLoader {
 public:
  ClassifyLoader(std::vector<ClassifySample> samples, ClassifyLoaderOptions options);
  ~ClassifyLoader();  // stops and joins the workers, also in the middle of an epoch
  ClassifyLoader(const ClassifyLoader&) = delete;
  ClassifyLoader& operator=(const ClassifyLoader&) = delete;

  int64_t dataset_size() const { return static_cast<int64_t>(samples_.size()); }
  // min(options.batch_size, dataset_size()), as the reference caps it.
  int batch_size() const { return batch_size_; }
  // Samples this rank sees per epoch (ceil(dataset / world)) and batches per epoch (the last may be
  // short): the reference's len(dataloader).
  int64_t samples_per_epoch() const;
  int64_t len() const;
  const ClassifyLoaderOptions& options() const { return options_; }
  const std::vector<ClassifySample>& samples() const { return samples_; }

  // This rank's dataset indices for `epoch`, in order.
  std::vector<int64_t> epoch_indices(int64_t epoch) const;

  // Begins an epoch (abandoning what is left of the previous one) at batch `first_batch` (a run
  // resumed inside an epoch) and sets the workers going.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch in order, or nullopt when the epoch is done. A worker's failure (an image that
  // cannot be read) is thrown here as kestrel::Error naming the file; the epoch then ends.
  std::optional<ClassifyBatch> next();

  // Batch b of `epoch`, built on the calling thread as a worker would.
  ClassifyBatch build_batch(int64_t epoch, int64_t b) const;

 private:
  ClassifyBatch build(int64_t epoch, int64_t b, const std::vector<int64_t>& order, DecodeBuffers* buffers) const;

  std::vector<ClassifySample> samples_;
  ClassifyLoaderOptions options_;
  int batch_size_ = 0;
  bool pinned_ = false;
  ClassifyImages images_;

  using Batches = OrderedBatches<ClassifyBatch, DecodeBuffers, std::vector<int64_t>>;  // an epoch's order
  std::unique_ptr<Batches> batches_;  // last: its workers stop before the members above go
};

}  // namespace kestrel::yolo::data
