// The trainer's plumbing, kept out of the loop: device and precision choice, the dataset
// argument, values shared between ranks, --freeze, --multi-scale resizing, the options as they
// go into opt.yaml and checkpoints.
#pragma once
#include <string>
#include <vector>

#include "engine/json.h"
#include "engine/tensor.h"
#include "yolo/data/records.h"
#include "yolo/hyp.h"
#include "yolo/rank_info.h"
#include "yolo/train_options.h"

namespace kestrel::yolo {

// --device: "", "cpu", "0", "0,1": local rank r opens the r-th listed GPU (dist/device_plan.h).
Device pick_device(const std::string& spec, int local_rank);
// --amp: bf16 | fp16 | off; "" = bf16 on sm_80+ GPUs (fp16 before), off on the CPU.
DType pick_compute_dtype(const std::string& amp, Device device);
// --cuda-graph: auto captures when nothing the run asked for changes the step's shapes or needs
// the host inside the step; on insists (refused, saying why, where graphs cannot run); off runs
// eagerly. Whether the training step runs in graph mode.
bool cuda_graphs_wanted(const TrainOptions& o, Device device, const RankInfo& rank);
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
// --data: a dataset yaml (its dataset downloaded first when missing and the yaml gives a .zip
// address, yolo/dataset_download.h), or synthetic (generated once).
std::string resolve_data(const std::string& data);
// Rank 0's value on every rank.
std::string broadcast_string(const RankInfo& r, Device device, const std::string& s);
// For each flag, how many ranks raised it (one all-reduce; every rank must call it at the same
// point). A single process gets its own flags back as 0/1.
std::vector<int> ranks_raising(const RankInfo& r, Device device, const std::vector<bool>& flags);
// The other ranks wait here while rank 0 finishes `phase` alone (every rank calls it at the same
// point): up to --dist-phase-timeout, outside the collectives' timeout, with nothing pending.
void wait_for_rank0(const RankInfo& r, const std::string& phase);
std::string format_seconds(double s);
// "model.<i>." prefixes of the frozen layers (one number N: the first N of the model's
// layer_count layers).
std::vector<std::string> freeze_prefixes(const std::vector<int>& freeze, int layer_count);
// Host-side resize of a u8 NHWC batch to long side `size` (rounded up to 32); boxes are
// normalised, so the targets stay.
Tensor resize_batch(const Tensor& images, int64_t size);
// --multi-scale: the training size of batch i of an epoch, in [img_size / 2, img_size * 1.5 + gs)
// rounded down to the stride; from its own random stream per (seed, rank, epoch, batch), so that a
// run resumed mid-epoch draws what the uninterrupted one would.
int64_t multi_scale_size(uint64_t seed, int rank, int64_t epoch, int64_t batch, int64_t img_size, int64_t gs);
// The options, the model yaml text, nc and names: what val/detect need to rebuild the model.
json::Value options_json(const TrainOptions& o, const std::string& cfg_text, int nc,
                         const std::vector<std::string>& names);
std::string read_text(const std::string& path);

}  // namespace kestrel::yolo
