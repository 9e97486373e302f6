// One training batch from the loader to the step's inputs, in one place (BatchPrep): its labels
// checked on the host (ComputeLoss::check_targets; the step reads nothing back), --multi-scale's
// resize, the targets padded for a GPU step (pad_batch_targets), the upload (data::BatchUploader)
// and the images as the model's input.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "yolo/common/hyp.h"
#include "yolo/data/batch_uploader.h"
#include "yolo/data/loader.h"
#include "yolo/data/records.h"
#include "yolo/train/loss.h"

namespace kestrel::yolo {

// The target rows every batch of a graphed run of several processes is padded to: one count for
// the whole run, so that every rank's step has the same shape at every batch (TrainStepOptions
// says why they must agree). It bounds the labels one rank's batch can hold: `batch` samples,
// each a mosaic of 4 images (8 with mixup) drawn with replacement, or a single image without
// mosaic (or with --rect), each image with at most the dataset's largest label count; rounded up
// as padded_target_rows rounds. Every rank derives it from the same records (checked at start-up).
int64_t run_target_rows(const std::vector<data::ImageRecord>& records, int64_t batch,
                        const Hyp& hyp, bool rect);
// A batch's targets padded for the GPU step (padding rows match nothing): to run_rows when set
// (> 0: a graphed multi-process run, whose ranks' steps must share one shape), else to
// padded_target_rows' few fixed counts, so the loss's buffers and the uploader's ring keep their
// sizes from batch to batch. Throws, naming batch `ni`, if the targets exceed run_rows.
Tensor pad_batch_targets(const Tensor& targets, int64_t run_rows, int64_t ni);
// Host-side resize of a u8 NHWC batch to long side `size` (rounded up to 32); boxes are
// normalised, so the targets stay.
Tensor resize_batch(const Tensor& images, int64_t size);
// --multi-scale: the training size of batch i of an epoch, in [img_size / 2, img_size * 1.5 + gs)
// rounded down to the stride; from its own random stream per (seed, rank, epoch, batch), so that a
// run resumed mid-epoch draws what the uninterrupted one would.
int64_t multi_scale_size(uint64_t seed, int rank, int64_t epoch, int64_t batch, int64_t img_size, int64_t gs);

struct BatchPrepOptions {
  bool multi_scale = false;  // --multi-scale: each batch resized to multi_scale_size
  uint64_t seed = 0;
  int rank = 0;
  int64_t img_size = 640;
  int64_t stride = 32;       // the model's largest stride (gs)
  int64_t target_rows = 0;   // > 0: every batch's targets padded to this (run_target_rows)
};

// What the training step takes for one batch, on the step's device.
struct StepInputs {
  Tensor input;    // [B, H, W, 3] in the compute dtype, scaled to [0, 1]
  Tensor targets;  // f32 [M, 6]; on a GPU padded with rows that match nothing
};

class BatchPrep {
 public:
  BatchPrep(const ComputeLoss& loss, Device device, DType compute, BatchPrepOptions options);
  // Batch i of `epoch`, the run's batch ni. Throws before anything is uploaded when a label is
  // out of range (naming it) or, in a graphed run of several processes, when the batch holds more
  // labels than target_rows.
  StepInputs prepare(const data::Batch& batch, int64_t epoch, int64_t i, int64_t ni);

 private:
  const ComputeLoss& loss_;
  Device device_;
  DType compute_;
  BatchPrepOptions options_;
  data::BatchUploader uploader_;
};

}  // namespace kestrel::yolo
