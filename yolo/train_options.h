// The options of a training run (`kestrel train`'s flags), as opt.yaml and checkpoints record them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/json.h"
#include "yolo/hyp.h"

namespace kestrel::yolo {

struct TrainOptions {
  std::string data;     // dataset yaml, or "synthetic" (default)
  std::string cfg = "models/yolov5s.yaml";  // "": the model yaml the weights carry
  std::string weights;  // .safetensors or YOLOv5 .pt to start from ("" = scratch)
  std::string hyp;      // hyp yaml ("" = the built-in scratch-low values)
  std::optional<Hyp> hyp_values;  // in place of the file (--evolve's generations)
  int epochs = 100;
  int batch_size = 16;  // total over all ranks
  int img_size = 640;
  bool rect = false;
  std::optional<std::string> resume;  // checkpoint path ("" = the latest last.safetensors)
  bool nosave = false, noval = false, noautoanchor = false, noplots = false;
  bool no_tensorboard = false;  // no TensorBoard event file in the run directory
  std::string cache;  // "" or "ram"
  std::string device;  // "", "cpu", "0", "0,1"
  bool multi_scale = false, single_cls = false;
  // --image-weights: each epoch's images drawn by class-weighted image weights (one process only)
  bool image_weights = false;
  // --quad: every 4 loaded images become one at twice the size (data/quad_collate.h), loss x4
  bool quad = false;
  std::string optimizer = "SGD";
  bool sync_bn = false;
  int workers = 8;
  std::string project = "runs/train", name = "exp";
  bool exist_ok = false, cos_lr = false;
  double label_smoothing = 0.0;
  int patience = 100;
  std::vector<int> freeze;  // layer indices (a single N means the first N layers)
  int save_period = -1;
  uint64_t seed = 0;
  bool deterministic = false;
  std::string amp;  // "bf16" | "fp16" | "off"; "" = bf16 on sm_80+ GPUs, off on the CPU
  double bucket_cap_mb = 4.0;
  double edge_bucket_mb = 0.25;  // dist::ReducerOptions::edge_bucket_cap_mb (0: no edge buckets)
  bool no_overlap = false;
  bool timed_buckets = false;  // dist::ReducerOptions::timed_buckets
  std::string grad_compress = "none";  // "none" | "fp16" | "bf16": DDP buckets all-reduced in 16 bits
  std::string trace;  // Chrome trace of the steps' compute and communication timelines
  bool check_sync = false;  // compare parameters (and the BN buffer list) across ranks every step
  // CUDA graphs of the training step: "auto" (on for CUDA runs of fixed shape), "on", "off".
  std::string cuda_graph = "auto";
  double dist_timeout = 10800;  // seconds a collective may take (a dead or stuck peer), the reference's
  // Seconds the other ranks wait while rank 0 works alone (label caches, AutoAnchor, validation,
  // plots, checkpoints): a wait outside the collectives' timeout (ProcessGroup::wait_for_all_ranks).
  double dist_phase_timeout = 10800;
  int max_batches = 0;  // testing aid: stop each epoch after this many batches (0 = all)
  int64_t interrupt_after = 0;  // testing aid: act as on SIGINT after this many batches (0 = never)
  // --evolve N: this run is one of N generations (yolo/evolve.h): as the reference, it writes no
  // weights and no plots, and validates only its final epoch.
  int evolve = 0;

  // The options as opt.yaml lists them (reference flag names).
  std::vector<std::pair<std::string, std::string>> to_pairs() const;
};

// The options, the model yaml text, nc and names: what val/detect need to rebuild the model.
json::Value options_json(const TrainOptions& o, const std::string& cfg_text, int nc,
                         const std::vector<std::string>& names);

}  // namespace kestrel::yolo
