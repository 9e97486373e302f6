// How a training batch is shaped for the step on the host: --multi-scale's size and resize, and
// the target rows a GPU step pads to.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "yolo/data/records.h"
#include "yolo/hyp.h"

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

}  // namespace kestrel::yolo
