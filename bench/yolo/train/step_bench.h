// One training-step benchmark configuration: the trainer's step (input conversion, forward, loss,
// scaled backward, unscale, clip to norm 10, SGD step, zero_grad) timed over `iters` steps after
// `warmup` ones, on resident synthetic batches or fed by the real augmenting loader.
#pragma once
#include <string>

#include "engine/device.h"

namespace kestrel::bench {

struct StepConfig {
  std::string task = "detect";  // "classify": classify/train.py's step (classify_step_bench.cpp);
                                // "segment": segment/train.py's (segment_step_bench.cpp)
  std::string model;  // a yaml path, or a name under models/ ("yolov5s")
  int img_size = 640;
  int batch = 16;
  std::string amp = "off";  // bf16, fp16, off, bf16-emulated or bf16-operands (CPU)
  Device device = Device::cpu();
  int iters = 10;
  int warmup = 2;
  std::string data;  // empty: synthetic device-resident batches; else a dataset yaml or "synthetic"
  int workers = 4;
  uint64_t seed = 0;
  bool profile = false;  // print the per-op time table of the timed steps to stderr
  bool forward_only = false;  // inference: eval mode, no gradients (val/detect's forward)
  bool cuda_graph = false;    // the step replayed from CUDA graphs (TrainStep's graph mode)
  bool tf32 = false;          // CUDA float32 convolutions on TF32 tensor cores (kestrel train's --tf32)
};

struct StepResult {
  double ms_per_step = 0;
  double images_per_s = 0;
  double mfu = 0;             // model FLOP/s (3 x forward GFLOPs per image) over the device peak
  double peak_gflops = 0;     // that peak: the compute type's (bench_common.h device_peak)
  double peak_mem_mb = 0;     // CUDA: allocator peak during the timed steps; CPU: process max RSS
  double data_wait_pct = -1;  // with a loader: time blocked in next() as % of the timed span
  double gflops_per_image = 0;
  double last_loss = 0;       // (box + obj + cls, + seg) of the last step, to show the steps did real work
  int64_t graph_replays = -1; // with cuda_graph: timed steps that replayed a graph
};

StepResult run_step_bench(const StepConfig& config);
// The classifier's step, as classify/train.py takes it: the model cut at layer 10 with a Classify
// head for 1000 classes, resident random normalised images and labels, cross-entropy with label
// smoothing 0.1, backward, clip to norm 10, the Adam step (smart_optimizer), zero_grad and the
// EMA update. float32 only.
StepResult run_classify_step_bench(const StepConfig& config);
// The segmentation step, as segment/train.py takes it: SegmentationModel (80 classes), SGD over
// smart_optimizer's groups, ComputeSegLoss(overlap) with the scaled hyp, on one resident random
// batch (u8 images, 4 random boxes per image, overlap masks at img/4 whose pixels inside each box
// hold its 1-based index in its image, as the loader makes them), through TrainStep with the
// segmentation objective (clip to norm 10, SGD step, zero_grad). Resident batches, eager steps.
StepResult run_segment_step_bench(const StepConfig& config);
// A model argument as a yaml path ("yolov5s" -> models/yolov5s.yaml).
std::string model_path(const std::string& model);
// The process's peak resident memory (MB).
double max_rss_mb();

// The JSON line of one configuration (the error variant names the failure instead of numbers).
std::string result_json(const StepConfig& config, const StepResult& result);
std::string error_json(const StepConfig& config, const std::string& error);

}  // namespace kestrel::bench
