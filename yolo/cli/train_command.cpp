// `kestrel train`: the reference train.py's flags, plus --amp, the launcher flags
// (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port, --max-restarts),
// --bucket-cap-mb, --no-overlap and --trace. With --nproc-per-node N > 1, a --device list of N > 1
// GPUs, or --max-restarts K > 0, this process becomes the launcher and starts N workers running
// the same command. `kestrel segment train` is the same command over segmentation's option table
// (segment/train.py's flags: --mask-ratio, --no-overlap for the masks, DDP's --no-ddp-overlap).
#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>

#include "base/error.h"
#include "dist/device_plan.h"
#include "dist/env.h"
#include "dist/launcher.h"
#include "dist/restart_policy.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/common/run_dir.h"
#include "yolo/common/shipped_files.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/evolve.h"
#include "yolo/train/trainer.h"

namespace kestrel::cli {
namespace {

// The flags, from the options' one table (yolo/train/train_options.h): its rows in its order, each
// showing its field's default (TrainOptions' initialiser) unless the row names another.
FlagTable train_flags(yolo::TrainTaskKind task) {
  static std::deque<std::string> fallbacks;  // the defaults' text, alive as long as the table
  const yolo::TrainOptions defaults = yolo::train_defaults(task);
  FlagTable flags;
  for (const yolo::TrainOptionSpec& s : yolo::train_option_specs(task)) {
    const char* fallback = s.fallback;
    if (!fallback && s.write) fallback = fallbacks.emplace_back(s.write(defaults)).c_str();
    flags.push_back({s.flag, s.value, fallback, s.help});
  }
  return flags;
}
const FlagTable kFlags = train_flags(yolo::TrainTaskKind::Detect);
const FlagTable kSegmentFlags = train_flags(yolo::TrainTaskKind::Segment);

// Every option of the table that the command line gives, read into its typed field (checked as it
// is read: a bad value is a usage error naming the flag).
void read_options(const Args& args, yolo::TrainOptions& o) {
  for (const yolo::TrainOptionSpec& s : yolo::train_option_specs(o.task)) {
    if (!s.read || !args.has(s.flag)) continue;
    try {
      s.read(o, s.value ? args.get(s.flag, "") : "true");
    } catch (const yolo::OptionError& e) {
      throw UsageError(std::string("--") + s.flag + " " + e.what());
    }
  }
}

// The reference's Google Cloud and Weights & Biases options: Kestrel has neither, so each given
// one gets a line saying what Kestrel does instead, and training goes on.
std::vector<std::string> cloud_option_notes(const Args& args) {
  std::vector<std::string> notes;
  if (!args.get("bucket", "").empty())  // --bucket '' is the reference's default: none
    notes.push_back("--bucket " + args.get("bucket", "") + ": Kestrel copies nothing to or from gs://" +
                    args.get("bucket", "") + " (no gsutil); evolve.csv and every result stay in the run "
                    "directory, copy them with gsutil yourself");
  if (args.has("entity"))
    notes.push_back("--entity " + args.get("entity", "") + ": Kestrel has no Weights & Biases logging; "
                    "metrics go to results.csv and TensorBoard event files in the run directory");
  if (args.has("upload-dataset"))
    notes.push_back("--upload_dataset: Kestrel uploads no dataset (no W&B artifacts); it reads the data "
                    "where --data points");
  if (args.has("bbox-interval"))  // an int in the reference: anything else is a usage error there too
    notes.push_back("--bbox_interval " + std::to_string(args.get_int32("bbox-interval", -1)) + ": Kestrel logs no box images to "
                    "W&B; the run directory has the train_batch*.jpg and val_batch*_pred.jpg plots");
  if (args.has("artifact-alias"))
    notes.push_back("--artifact_alias " + args.get("artifact-alias", "") + ": Kestrel reads no W&B "
                    "dataset artifacts; --data names the dataset");
  return notes;
}

// By the process that trains as rank 0 only (a launcher leaves them to its rank 0 worker).
void print_notes(const std::vector<std::string>& notes) {
  if (notes.empty() || dist::resolve_dist_options({}, dist::process_environment()).rank != 0) return;
  for (const std::string& note : notes) std::printf("%s\n", note.c_str());
  std::fflush(stdout);
}

// Whether `word` spells `flag` of `spec` bare, as argparse reads it: --name or
// --name_with_underscores, or a prefix of it that names no other flag; no "=value".
bool spells_bare(const std::string& word, const std::string& flag, const std::map<std::string, bool>& spec) {
  if (word.rfind("--", 0) != 0 || word.find('=') != std::string::npos || word.size() == 2) return false;
  std::string name = word.substr(2);
  std::replace(name.begin(), name.end(), '_', '-');
  if (flag.rfind(name, 0) != 0) return false;
  if (name == flag) return true;
  for (const auto& entry : spec)
    if (entry.first != flag && entry.first.rfind(name, 0) == 0) return false;  // ambiguous: Args says so
  return true;
}

bool is_count(const std::string& word) {
  return !word.empty() && word.find_first_not_of("0123456789") == std::string::npos;
}

// The batch size the workers will train with: a resumed run keeps its checkpoint's.
int effective_batch_size(const yolo::TrainOptions& o) {
  if (!o.resume) return o.batch_size;
  std::string path = *o.resume;
  std::filesystem::file_time_type newest{};
  if (path.empty())  // as the trainer: the newest last.safetensors under the project
    for (const auto& [found, written] : dist::find_checkpoints(o.project))
      if (path.empty() || written > newest) {
        path = found.string();
        newest = written;
      }
  if (path.empty() || !std::filesystem::exists(path)) return o.batch_size;  // the trainer reports it
  const yolo::CheckpointInfo info = yolo::read_checkpoint_info(path);  // alive while b points into it
  const json::Value* b = info.options.find("batch_size");
  return b ? std::stoi(b->as_string()) : o.batch_size;
}

// Usage errors of a launch, before any worker starts: every worker would fail on them (and be
// restarted, with --max-restarts).
void check_launch(const yolo::TrainOptions& o, int nproc, int nnodes) {
  if (nnodes < 1) throw UsageError("--nnodes must be >= 1");
  const int batch = effective_batch_size(o);
  const int64_t world = int64_t{nproc} * nnodes;  // two int32 flags: their product may not fit
  if (batch % world != 0)
    throw UsageError(str("--batch-size ", batch, " must be a multiple of the world size ",
                         world, " (--nproc-per-node ", nproc, " x --nnodes ", nnodes, ")"));
}

// How many local workers to start: --nproc-per-node, or one per GPU of a --device list. A process
// that a launcher started (this one's workers, torchrun, mpirun, srun) is a worker itself and
// trains: --device then only picks its GPU.
int local_workers(const std::string& device, std::optional<int> nproc_flag) {
  if (!dist::detect_launcher(dist::process_environment()).empty()) return 1;
  const bool lists_gpus = !dist::parse_device_list(device).empty();
  const dist::WorkerPlan plan =
      dist::plan_local_workers(device, nproc_flag, lists_gpus ? cuda_device_count() : 0);
  if (!nproc_flag && plan.nproc_per_node > 1)
    std::printf("--device %s: starting %d processes, one per GPU (DDP)\n", device.c_str(),
                plan.nproc_per_node);
  return plan.nproc_per_node;
}

// Where ranks other than 0 write rank<R>.log: the project that holds the run, beside its run
// directory, never in it (only rank 0 writes there). A resumed checkpoint names its own project
// (<project>/<run>/weights/last.safetensors), wherever --project points.
std::filesystem::path rank_log_dir(const yolo::TrainOptions& o) {
  if (!o.resume || o.resume->empty()) return o.project;
  return std::filesystem::path(*o.resume).parent_path().parent_path().parent_path();
}

// Restarts resume this run's checkpoint, or start over in the run directory that the first
// attempt creates (predicted here, as the trainer names it).
dist::RestartPolicy restart_policy(const yolo::TrainOptions& o,
                                   const std::vector<std::string>& command, int max_restarts) {
  const std::filesystem::path run_dir =
      yolo::increment_path((std::filesystem::path(o.project) / o.name).string(), o.exist_ok);
  return dist::RestartPolicy(
      {command, o.project, run_dir.lexically_relative(o.project).string(), max_restarts});
}

}  // namespace

const Command kTrainCommand = {
    "train", "train a YOLOv5 model (reference train.py flags)",
    "usage: kestrel train [--data D.yaml|synthetic] [--cfg models/yolov5s.yaml] [--weights W.pt|W.safetensors]\n"
    "                     [--hyp H.yaml] [--epochs 100] [--batch-size 16] [--img-size 640] [--rect]\n"
    "                     [--resume [PATH]] [--nosave] [--noval] [--noautoanchor]\n"
    "                     [--noplots] [--cache ram] [--device cpu|0|0,1] [--multi-scale]\n"
    "                     [--single-cls] [--optimizer SGD|Adam|AdamW] [--sync-bn] [--workers 8]\n"
    "                     [--project runs/train] [--name exp] [--exist-ok] [--cos-lr]\n"
    "                     [--label-smoothing 0.0] [--patience 100] [--freeze N|i,j,..]\n"
    "                     [--save-period -1] [--seed 0] [--deterministic]\n"
    "                     [--amp bf16|fp16|off|bf16-emulated]\n"
    "                     [--nproc-per-node N] [--nnodes M --node-rank R --master-addr A\n"
    "                     --master-port P] [--bucket-cap-mb 4] [--no-overlap] [--timed-buckets] [--trace FILE]\n"
    "                     [--edge-bucket-mb 0.25] [--grad-compress none|fp16|bf16]\n"
    "                     [--dist-timeout 10800] [--dist-phase-timeout 10800] [--check-sync]\n"
    "                     [--max-restarts 0] [--evolve [300]] [--no-tensorboard] [--no-pt]\n"
    "                     [--cuda-graph auto|on|off] [--image-weights] [--quad]\n"
    "                     [--bucket B] [--entity E] [--upload_dataset [val]] [--bbox_interval N]\n"
    "                     [--artifact_alias A]\n"
    "  --batch-size is the total over all ranks; --data defaults to the built-in synthetic set.\n"
    "  --weights without --cfg trains the model the weights carry (a YOLOv5 .pt's or Kestrel's).\n"
    "  --device 0,1 (a list of GPUs) starts one process per GPU (DDP).\n"
    "  --max-restarts K: when a worker dies, restart all of them (resuming from this run's newest\n"
    "  last.safetensors) up to K times.\n"
    "  --image-weights: each epoch draws its images weighted by their classes' (1 - mAP)^2 (one\n"
    "  process only). --quad: batches of 4x fewer images at 2x size (loss x4), as the reference.\n"
    "  --bucket, --entity, --upload_dataset, --bbox_interval, --artifact_alias (Google Cloud and\n"
    "  W&B) are accepted with a note: Kestrel uploads nothing and logs to TensorBoard files.\n"
    "  --evolve N: N generations of hyperparameter evolution (default project runs/evolve):\n"
    "  evolve.csv, hyp_evolve.yaml and evolve.png in the run directory.\n"
    "  TensorBoard event files go to the run directory (tensorboard --logdir runs/train) unless\n"
    "  --no-tensorboard; --noplots leaves them on.\n"
    "  weights/ holds last.safetensors and best.safetensors (what --resume continues exactly) and,\n"
    "  unless --no-pt, last.pt and best.pt in the reference's format (its val.py, detect.py,\n"
    "  export.py and train.py --resume read them; last.pt is the last completed epoch's).\n"
    "  --grad-compress fp16|bf16: each rank sends its gradients as 16-bit values divided by the\n"
    "  world size, the sum is widened back to fp32 (PyTorch DDP's fp16/bf16_compress_hook; fp16\n"
    "  turns gradients of magnitude 65520 and above into inf).\n"
    "  --cuda-graph: capture each training step shape once into a CUDA graph and replay it\n"
    "  (auto: on for CUDA runs without --multi-scale, --rect or --trace; off: eager).\n",
    run_train, &kFlags};

const Command kSegmentTrainCommand = {
    "train", "train a YOLOv5 segmentation model (reference segment/train.py flags)",
    "usage: kestrel segment train [--data coco128-seg.yaml] [--cfg models/yolov5s-seg.yaml]\n"
    "                     [--weights W-seg.pt|W.safetensors] [--mask-ratio 4] [--no-overlap]\n"
    "                     [--project runs/train-seg] and kestrel train's other flags\n"
    "  As kestrel train (the same options, resume, DDP and launcher), with segment/train.py's\n"
    "  differences: a -seg model, polygon labels drawn into masks at 1/--mask-ratio of the input\n"
    "  (one index image per image, or one mask per instance with --no-overlap), the mask loss,\n"
    "  box and mask metrics (fitness 0.1 mAP50 + 0.9 mAP50-95 of both) and results.csv's\n"
    "  (B)/(M) columns. DDP's --no-overlap is spelt --no-ddp-overlap here. --evolve records 12 results\n"
    "  a generation (boxes' and masks' metrics, the seg loss) and ranks by the seg fitness. No W&B\n"
    "  flags (segment/train.py has none); CUDA graphs stay off (the mask loss reads the targets).\n",
    run_segment_train, &kSegmentFlags};

int run_train(const std::vector<std::string>& raw) { return run_training(raw, yolo::TrainTaskKind::Detect); }
int run_segment_train(const std::vector<std::string>& raw) { return run_training(raw, yolo::TrainTaskKind::Segment); }

int run_training(const std::vector<std::string>& raw, yolo::TrainTaskKind task) {
  const bool segment = task == yolo::TrainTaskKind::Segment;
  const std::map<std::string, bool> spec = flag_spec(segment ? kSegmentFlags : kFlags);
  // The reference's `--resume [PATH]`: an optional value, taken when the next word is no flag.
  std::vector<std::string> argv;
  for (size_t i = 0; i < raw.size(); ++i) {
    const bool next_is_value = i + 1 < raw.size() && raw[i + 1].rfind("--", 0) != 0;
    if (raw[i] == "--cache" && !next_is_value) {  // a bare --cache means ram, as the reference
      argv.push_back("--cache");
      argv.push_back("ram");
    } else if (raw[i] == "--evolve" && !(next_is_value && is_count(raw[i + 1]))) {
      argv.push_back("--evolve");  // a bare --evolve: the reference's 300 generations
      argv.push_back("300");
    } else if (!segment && spells_bare(raw[i], "upload-dataset", spec) && !next_is_value) {
      argv.push_back(raw[i]);  // the reference's nargs='?', const=True
      argv.push_back("true");
    } else if (raw[i] == "--resume" && next_is_value) {
      argv.push_back("--resume-from");
      argv.push_back(raw[++i]);
    } else {
      argv.push_back(raw[i]);
    }
  }
  Args args(argv, spec);
  yolo::TrainOptions o = yolo::train_defaults(task);
  read_options(args, o);
  // As the reference's Model(cfg or ckpt['model'].yaml): weights without --cfg bring their model.
  if (!args.has("cfg") && !o.weights.empty()) o.cfg.clear();
  if (args.has("resume") && args.has("resume-from")) throw UsageError("give --resume or --resume-from, not both");
  if (args.has("resume")) o.resume = "";
  if (args.has("resume-from")) o.resume = args.get("resume-from", "");
  // A resumed run takes its files from the checkpoint; --resume with --evolve is no such run but
  // continues the newest evolution's directory (yolo/train/evolve), and reads the files as given.
  if (!o.resume || o.evolve > 0) {
    if (!o.cfg.empty()) o.cfg = yolo::find_shipped_file(o.cfg, "--cfg");
    if (!o.hyp.empty()) o.hyp = yolo::find_shipped_file(o.hyp, "--hyp");
  }

  const std::optional<int> nproc_flag = args.get_optional_int32("nproc-per-node");
  if (nproc_flag && *nproc_flag < 1) throw UsageError("--nproc-per-node must be >= 1");
  const int max_restarts = args.get_int32("max-restarts", 0);
  if (max_restarts < 0) throw UsageError("--max-restarts must be >= 0");
  const int nproc = local_workers(o.device, nproc_flag);
  if (o.evolve > 0) {
    if (nproc > 1 || args.has("nnodes"))
      throw UsageError("--evolve is not compatible with multi-process (DDP) training, as in the "
                       "reference; evolve in one process");
    print_notes(cloud_option_notes(args));
    const int generations = o.evolve;
    o.evolve = 0;  // evolve() marks each generation's options itself
    return yolo::evolve(o, generations);
  }
  if (o.image_weights && (nproc > 1 || args.has("nnodes")))
    throw UsageError("--image-weights is not compatible with multi-process (DDP) training, as in the "
                     "reference (its weighted draw is one process's); train in one process or drop it");
  if (nproc > 1 || args.has("nnodes") || max_restarts > 0) {
    dist::LaunchOptions l;
    l.nproc_per_node = nproc;
    l.nnodes = args.get_int32("nnodes", 1);
    l.node_rank = args.get_int32("node-rank", 0);
    l.master_addr = args.get("master-addr", "127.0.0.1");
    l.master_port = args.get_int32("master-port", 29500);
    l.log_dir = rank_log_dir(o);
    l.command = {dist::current_executable().string()};
    if (segment) l.command.push_back("segment");
    l.command.push_back("train");
    for (const auto& a : dist::strip_launcher_flags(argv)) l.command.push_back(a);
    check_launch(o, l.nproc_per_node, l.nnodes);
    if (max_restarts == 0) return dist::launch_workers(l).exit_code;  // it prints what failed
    dist::RestartPolicy policy = restart_policy(o, l.command, max_restarts);
    return dist::launch_workers(l, &policy).exit_code;
  }
  if (!segment) print_notes(cloud_option_notes(args));
  return yolo::train(o);
}

}  // namespace kestrel::cli
