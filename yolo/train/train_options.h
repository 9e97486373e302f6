// The options of a training run (`kestrel train`'s flags), typed and checked once, and the one
// table that names each of them: its flag, its opt.yaml / checkpoint key, its help, and how its
// field reads and writes text. The command line, opt.yaml, checkpoints (and their resume), the
// start-up echo and --help all go through the table; after the command line nothing reads an
// option as a string or checks it again.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dist/grad_compress.h"
#include "io/json.h"
#include "yolo/common/hyp.h"
#include "yolo/train/optimizer.h"

namespace kestrel::yolo {

enum class CacheMode { None, Ram, Disk };                         // --cache: "" | ram | disk
enum class AmpMode { Auto, Bf16, Fp16, Off, Bf16Emulated };       // --amp: "" | bf16 | fp16 | off | bf16-emulated
enum class CudaGraphMode { Auto, On, Off };                       // --cuda-graph: auto | on | off
// Which model the run trains: `kestrel train` (detection) or `kestrel segment train`.
enum class TrainTaskKind { Detect, Segment };

struct TrainOptions {
  TrainTaskKind task = TrainTaskKind::Detect;  // picks the option table (train_option_specs)
  std::string data;     // dataset yaml, or "synthetic" (default)
  std::string cfg = "models/yolov5s.yaml";  // "": the model yaml the weights carry
  std::string weights;  // .safetensors or YOLOv5 .pt to start from ("" = scratch)
  std::string hyp;      // hyp yaml ("" = the built-in scratch-low values)
  std::optional<Hyp> hyp_values;  // in place of the file (--evolve's generations)
  int epochs = 100;
  int batch_size = 16;  // total over all ranks
  int img_size = 640;   // as asked; the trainer rounds it up to a multiple of the model's stride
  bool rect = false;
  std::optional<std::string> resume;  // checkpoint path ("" = the latest last.safetensors)
  bool nosave = false, noval = false, noautoanchor = false, noplots = false;
  bool no_tensorboard = false;  // no TensorBoard event file in the run directory
  bool no_pt = false;           // no best.pt / last.pt (the reference's format) beside the safetensors
  CacheMode cache = CacheMode::None;
  std::string device;  // "", "cpu", "0", "0,1"
  bool multi_scale = false, single_cls = false;
  // --image-weights: each epoch's images drawn by class-weighted image weights (one process only)
  bool image_weights = false;
  // --quad: every 4 loaded images become one at twice the size (data/quad_collate.h), loss x4
  bool quad = false;
  OptimizerKind optimizer = OptimizerKind::SGD;
  bool sync_bn = false;
  int workers = 8;
  std::string project = "runs/train", name = "exp";
  bool exist_ok = false, cos_lr = false;
  double label_smoothing = 0.0;
  int patience = 100;
  std::vector<int> freeze;  // layer indices (a single N means the first N layers)
  int save_period = -1;
  uint64_t seed = 0;
  bool deterministic = false;  // cuDNN: deterministic algorithms only, chosen by heuristics
  bool tf32 = true;            // CUDA float32 convolutions may use TF32 (PyTorch's default)
  AmpMode amp = AmpMode::Auto;  // Auto: bf16 on sm_80+ GPUs, off on the CPU
  double bucket_cap_mb = 4.0;
  double edge_bucket_mb = 0.25;  // dist::ReducerOptions::edge_bucket_cap_mb (0: no edge buckets)
  bool no_overlap = false;
  bool timed_buckets = false;  // dist::ReducerOptions::timed_buckets
  dist::GradCompress grad_compress = dist::GradCompress::None;  // DDP buckets all-reduced in 16 bits
  std::string trace;  // Chrome trace of the steps' compute and communication timelines
  bool check_sync = false;  // compare parameters (and the BN buffer list) across ranks every step
  // CUDA graphs of the training step: Auto (on for CUDA runs of fixed shape), On, Off.
  CudaGraphMode cuda_graph = CudaGraphMode::Auto;
  double dist_timeout = 10800;  // seconds a collective may take (a dead or stuck peer), the reference's
  // Seconds the other ranks wait while rank 0 works alone (label caches, AutoAnchor, validation,
  // plots, checkpoints): a wait outside the collectives' timeout (ProcessGroup::wait_for_all_ranks).
  double dist_phase_timeout = 10800;
  int max_batches = 0;  // testing aid: stop each epoch after this many batches (0 = all)
  int64_t interrupt_after = 0;  // testing aid: act as on SIGINT after this many batches (0 = never)
  // --evolve N: this run is one of N generations (yolo/train/evolve.h): as the reference, it writes no
  // weights and no plots, and validates only its final epoch.
  int evolve = 0;
  // Segmentation (segment/train.py's own flags): label masks at 1 / mask_ratio of the input, and
  // one index image per sample (overlap) or one mask per instance (--no-overlap).
  int mask_ratio = 4;
  bool no_overlap_masks = false;

  // The recorded options (every table row with a key of the task's table), in the table's order:
  // opt.yaml's pairs.
  std::vector<std::pair<std::string, std::string>> to_pairs() const;
};

// A value an option cannot take: what is wrong with it, for the caller to name the flag or key.
class OptionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One option of `kestrel train`, in the reference's flag order (Kestrel's own after them):
// - flag: its command-line name ("img-size"; nullptr: none, a field set by Kestrel itself);
// - key: its name in opt.yaml and checkpoints ("imgsz"; nullptr: not recorded);
// - value: how --help names its value ("N", "D.yaml"; nullptr: a switch, which takes none);
// - help: one line for --help;
// - read / write: the field from and to text (nullptr: the command's own flag, with no field:
//   the launcher's, the cloud services', --resume). read throws OptionError.
// A field's default is TrainOptions' initialiser; --help and the echo show write(TrainOptions{}).
struct TrainOptionSpec {
  const char* flag;
  const char* key;
  const char* value;
  const char* help;
  void (*read)(TrainOptions& options, const std::string& text);
  std::string (*write)(const TrainOptions& options);
  const char* fallback = nullptr;  // the command's own flags: what --help shows as the default
};
const std::vector<TrainOptionSpec>& train_option_specs();
// `kestrel segment train`'s table: segment/train.py's flags (train.py's without the W&B ones, then
// --mask-ratio and --no-overlap, the masks' overlap), Kestrel's own as detection's, except that
// DDP's --no-overlap is spelt --no-ddp-overlap (key no_ddp_overlap) there.
const std::vector<TrainOptionSpec>& segment_train_option_specs();
const std::vector<TrainOptionSpec>& train_option_specs(TrainTaskKind task);
// A task's defaults: TrainOptions' initialisers; for segmentation segment/train.py's data
// (coco128-seg.yaml), project (runs/train-seg) and a -seg model (models/yolov5s-seg.yaml).
TrainOptions train_defaults(TrainTaskKind task);

// The enums' spellings, as the flags take them and opt.yaml records them; parse_* throw
// OptionError for anything else, listing the choices.
std::string cache_mode_name(CacheMode mode);
CacheMode parse_cache_mode(const std::string& text);
std::string amp_mode_name(AmpMode mode);
AmpMode parse_amp_mode(const std::string& text);
std::string cuda_graph_mode_name(CudaGraphMode mode);
CudaGraphMode parse_cuda_graph_mode(const std::string& text);

// The options, the model yaml text, nc and names: what val/detect need to rebuild the model; a
// segmentation run's also "task": "segment".
json::Value options_json(const TrainOptions& o, const std::string& cfg_text, int nc,
                         const std::vector<std::string>& names);

}  // namespace kestrel::yolo
