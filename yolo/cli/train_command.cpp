// `kestrel train`: the reference train.py's flags, plus --amp, the launcher flags
// (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port, --max-restarts),
// --bucket-cap-mb, --no-overlap and --trace. With --nproc-per-node N > 1, a --device list of N > 1
// GPUs, or --max-restarts K > 0, this process becomes the launcher and starts N workers running
// the same command.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "base/error.h"
#include "dist/device_plan.h"
#include "dist/env.h"
#include "dist/grad_compress.h"
#include "dist/launcher.h"
#include "dist/restart_policy.h"
#include "yolo/checkpoint.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/evolve.h"
#include "yolo/run_dir.h"
#include "yolo/shipped_files.h"
#include "yolo/trainer.h"

namespace kestrel::cli {
namespace {

// The reference's flags in its order, then Kestrel's own.
const FlagTable kFlags = {
    {"weights", "W.pt", "", "initial weights: a YOLOv5 .pt or a Kestrel .safetensors; empty: from scratch"},
    {"cfg", "M.yaml", "models/yolov5s.yaml", "model yaml; without it, --weights brings its own model"},
    {"data", "D.yaml", "synthetic", "dataset yaml (coco128.yaml, ... by name), or the built-in synthetic set"},
    {"hyp", "H.yaml", "hyp.scratch-low.yaml", "hyperparameters yaml (hyp.scratch-low.yaml, ... by name)"},
    {"epochs", "N", "100", "total training epochs"},
    {"batch-size", "N", "16", "total batch size over all ranks (each rank gets batch/world)"},
    {"img-size", "PIXELS", "640", "train and val image size (also --img, --imgsz)"},
    {"rect", nullptr, nullptr, "rectangular training batches"},
    {"resume", nullptr, nullptr, "resume the most recent run (or the checkpoint given as --resume PATH)"},
    {"resume-from", "PATH", nullptr, "resume this checkpoint (last.pt or last.safetensors); --resume PATH says the same"},
    {"nosave", nullptr, nullptr, "save only the final checkpoint"},
    {"noval", nullptr, nullptr, "validate only the final epoch"},
    {"noautoanchor", nullptr, nullptr, "keep the model's anchors (no AutoAnchor check)"},
    {"noplots", nullptr, nullptr, "write no plot files"},
    {"evolve", "[N]", nullptr, "evolve the hyperparameters over N generations (bare: 300)"},
    {"bucket", "B", "", "Google Cloud bucket: accepted with a note (Kestrel copies nothing to gs://)"},
    {"cache", "[ram]", nullptr, "cache decoded images in RAM (bare --cache: ram)"},
    {"image-weights", nullptr, nullptr, "draw each epoch's images weighted by their classes' (1 - mAP)^2 (one process)"},
    {"device", "cpu|0|0,1", "", "cpu, a GPU index, or a GPU list (one DDP process per GPU); empty: GPU 0 if any"},
    {"multi-scale", nullptr, nullptr, "vary the image size by +/- 50 % per batch"},
    {"single-cls", nullptr, nullptr, "train multi-class data as one class"},
    {"optimizer", "SGD|Adam|AdamW", "SGD", "optimizer"},
    {"sync-bn", nullptr, nullptr, "SyncBatchNorm across DDP ranks"},
    {"workers", "N", "8", "most data-loader workers per rank"},
    {"project", "DIR", "runs/train", "runs go to project/name"},
    {"name", "NAME", "exp", "runs go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"quad", nullptr, nullptr, "quad loader: batches of 4x fewer images at 2x size (loss x4)"},
    {"cos-lr", nullptr, nullptr, "cosine learning-rate schedule (linear otherwise)"},
    {"label-smoothing", "EPS", "0.0", "label smoothing epsilon"},
    {"patience", "EPOCHS", "100", "stop after this many epochs without improvement"},
    {"freeze", "N|i,j,..", "0", "freeze the first N layers, or the layers listed"},
    {"save-period", "EPOCHS", "-1", "also save a checkpoint every this many epochs (< 1: never)"},
    {"seed", "N", "0", "global training seed"},
    {"local-rank", "N", "-1", "torch.distributed.launch's argument: accepted; the rank comes from LOCAL_RANK, as in the reference"},
    {"entity", "E", nullptr, "W&B entity: accepted with a note (Kestrel logs to results.csv and TensorBoard)"},
    {"upload-dataset", "[val]", "False", "W&B dataset upload: accepted with a note (Kestrel uploads nothing)"},
    {"bbox-interval", "N", "-1", "W&B box-image interval: accepted with a note (see the batch plots instead)"},
    {"artifact-alias", "A", "latest", "W&B dataset artifact version: accepted with a note (--data names the data)"},
    {"deterministic", nullptr, nullptr, "deterministic algorithms only (reproducible, slower)"},
    {"amp", "bf16|fp16|off|bf16-emulated", nullptr,
     "mixed precision; default bf16 on sm_80+ GPUs, off on the CPU (bf16 there: bfloat16 convolutions, "
     "needs AVX-512 BF16 or AMX; bf16-emulated: the same numbers in float32, for checking)"},
    {"nproc-per-node", "N", "1", "start N local DDP worker processes"},
    {"nnodes", "N", "1", "number of machines in a multi-node run"},
    {"node-rank", "R", "0", "this machine's rank in a multi-node run"},
    {"master-addr", "HOST", "127.0.0.1", "address of node 0's rendezvous"},
    {"master-port", "PORT", "29500", "port of node 0's rendezvous"},
    {"bucket-cap-mb", "MB", "4", "DDP gradient bucket size"},
    {"edge-bucket-mb", "MB", "0.25", "DDP's first and last gradient bucket at most this size (0: off)"},
    {"no-overlap", nullptr, nullptr, "all-reduce gradients after backward instead of during it"},
    {"timed-buckets", nullptr, nullptr, "DDP on CPUs: cut gradient buckets again after step 2 by measured timing"},
    {"grad-compress", "none|fp16|bf16", "none", "all-reduce DDP gradients in 16 bits (DDP's fp16/bf16_compress_hook)"},
    {"trace", "FILE", nullptr, "write a Chrome trace of each step's compute and communication"},
    {"dist-timeout", "SECONDS", "10800", "how long a collective may take before the run fails"},
    {"dist-phase-timeout", "SECONDS", "10800", "how long ranks wait for rank 0's work alone (caches, validation)"},
    {"max-batches", "N", "0", "stop each epoch after N batches (0: all), for tests and timing"},
    {"check-sync", nullptr, nullptr, "compare parameters across ranks every step (debugging)"},
    {"max-restarts", "K", "0", "restart all workers when one dies, up to K times, resuming the newest checkpoint"},
    {"no-tensorboard", nullptr, nullptr, "write no TensorBoard event file"},
    {"cuda-graph", "auto|on|off", "auto", "replay each step shape from a CUDA graph (auto: fixed-shape CUDA runs)"}};

std::vector<int> parse_int_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    try {
      out.push_back(std::stoi(part));
    } catch (const std::exception&) {
      throw UsageError(std::string("--") + flag + " expects integers like 10 or 0,1,2, got '" + text + "'");
    }
  }
  return out;
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
    "                     [--max-restarts 0] [--evolve [300]] [--no-tensorboard]\n"
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
    "  --grad-compress fp16|bf16: each rank sends its gradients as 16-bit values divided by the\n"
    "  world size, the sum is widened back to fp32 (PyTorch DDP's fp16/bf16_compress_hook; fp16\n"
    "  turns gradients of magnitude 65520 and above into inf).\n"
    "  --cuda-graph: capture each training step shape once into a CUDA graph and replay it\n"
    "  (auto: on for CUDA runs without --multi-scale, --rect or --trace; off: eager).\n",
    run_train, &kFlags};

int run_train(const std::vector<std::string>& raw) {
  const std::map<std::string, bool> spec = flag_spec(kFlags);
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
    } else if (spells_bare(raw[i], "upload-dataset", spec) && !next_is_value) {
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
  yolo::TrainOptions o;
  o.data = args.get("data", "synthetic");
  o.weights = args.get("weights", "");
  // As the reference's Model(cfg or ckpt['model'].yaml): weights without --cfg bring their model.
  o.cfg = args.get("cfg", o.weights.empty() ? o.cfg : "");
  o.hyp = args.get("hyp", "");
  o.epochs = args.get_int32("epochs", o.epochs);
  o.batch_size = args.get_int32("batch-size", o.batch_size);
  o.img_size = args.get_int32("img-size", o.img_size);
  o.rect = args.has("rect");
  if (args.has("resume") && args.has("resume-from")) throw UsageError("give --resume or --resume-from, not both");
  if (args.has("resume")) o.resume = "";
  if (args.has("resume-from")) o.resume = args.get("resume-from", "");
  o.nosave = args.has("nosave");
  o.noval = args.has("noval");
  o.noautoanchor = args.has("noautoanchor");
  o.noplots = args.has("noplots");
  o.no_tensorboard = args.has("no-tensorboard");
  o.cache = args.get("cache", "");
  if (!o.cache.empty() && o.cache != "ram") throw UsageError("--cache supports ram");
  o.device = args.get("device", "");
  o.multi_scale = args.has("multi-scale");
  o.image_weights = args.has("image-weights");
  o.quad = args.has("quad");
  o.single_cls = args.has("single-cls");
  o.optimizer = args.get("optimizer", o.optimizer);
  if (o.optimizer != "SGD" && o.optimizer != "Adam" && o.optimizer != "AdamW")
    throw UsageError("--optimizer must be SGD, Adam or AdamW");
  o.sync_bn = args.has("sync-bn");
  o.workers = args.get_int32("workers", o.workers);
  o.project = args.get("project", o.project);
  o.name = args.get("name", o.name);
  o.exist_ok = args.has("exist-ok");
  o.cos_lr = args.has("cos-lr");
  o.label_smoothing = args.get_double("label-smoothing", 0.0);
  o.patience = args.get_int32("patience", o.patience);
  if (args.has("freeze")) o.freeze = parse_int_list(args.get("freeze", ""), "freeze");
  o.save_period = args.get_int32("save-period", -1);
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  o.deterministic = args.has("deterministic");
  o.amp = args.get("amp", "");
  o.bucket_cap_mb = args.get_double("bucket-cap-mb", o.bucket_cap_mb);
  o.edge_bucket_mb = args.get_double("edge-bucket-mb", o.edge_bucket_mb);
  o.no_overlap = args.has("no-overlap");
  o.timed_buckets = args.has("timed-buckets");
  o.grad_compress = args.get("grad-compress", "none");
  if (!dist::parse_grad_compress(o.grad_compress))
    throw UsageError("--grad-compress must be none, fp16 or bf16, got '" + o.grad_compress + "'");
  o.trace = args.get("trace", "");
  o.check_sync = args.has("check-sync");
  o.cuda_graph = args.get("cuda-graph", "auto");
  if (o.cuda_graph != "auto" && o.cuda_graph != "on" && o.cuda_graph != "off")
    throw UsageError("--cuda-graph must be auto, on or off, got '" + o.cuda_graph + "'");
  o.dist_timeout = args.get_double("dist-timeout", o.dist_timeout);
  o.dist_phase_timeout = args.get_double("dist-phase-timeout", o.dist_phase_timeout);
  o.max_batches = args.get_int32("max-batches", 0);
  // A resumed run takes its files from the checkpoint; --resume with --evolve is no such run but
  // continues the newest evolution's directory (yolo/evolve), and reads the files as given.
  if (!o.resume || args.has("evolve")) {
    if (!o.cfg.empty()) o.cfg = yolo::find_shipped_file(o.cfg, "--cfg");
    if (!o.hyp.empty()) o.hyp = yolo::find_shipped_file(o.hyp, "--hyp");
  }
  if (o.epochs < 1 || o.batch_size < 1 || o.img_size < 32 || o.workers < 0)
    throw UsageError("--epochs and --batch-size must be >= 1, --img-size >= 32, --workers >= 0");
  if (o.img_size > kMaxImageSize)
    throw UsageError("--img-size " + std::to_string(o.img_size) + " is above the limit of " +
                     std::to_string(kMaxImageSize) + " pixels a side");
  if (o.label_smoothing < 0 || o.label_smoothing >= 1) throw UsageError("--label-smoothing must be in [0, 1)");
  if (o.bucket_cap_mb <= 0) throw UsageError("--bucket-cap-mb must be positive");
  if (!(o.edge_bucket_mb >= 0))
    throw UsageError("--edge-bucket-mb must be >= 0 (0 turns edge buckets off), got " + args.get("edge-bucket-mb", ""));

  const std::optional<int> nproc_flag = args.get_optional_int32("nproc-per-node");
  if (nproc_flag && *nproc_flag < 1) throw UsageError("--nproc-per-node must be >= 1");
  const int max_restarts = args.get_int32("max-restarts", 0);
  if (max_restarts < 0) throw UsageError("--max-restarts must be >= 0");
  const int nproc = local_workers(o.device, nproc_flag);
  if (args.has("evolve")) {
    const int generations = args.get_int32("evolve", 300);
    if (generations < 1) throw UsageError("--evolve N needs N >= 1 generations");
    if (nproc > 1 || args.has("nnodes"))
      throw UsageError("--evolve is not compatible with multi-process (DDP) training, as in the "
                       "reference; evolve in one process");
    print_notes(cloud_option_notes(args));
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
    l.command = {dist::current_executable().string(), "train"};
    for (const auto& a : dist::strip_launcher_flags(argv)) l.command.push_back(a);
    check_launch(o, l.nproc_per_node, l.nnodes);
    if (max_restarts == 0) return dist::launch_workers(l).exit_code;  // it prints what failed
    dist::RestartPolicy policy = restart_policy(o, l.command, max_restarts);
    return dist::launch_workers(l, &policy).exit_code;
  }
  print_notes(cloud_option_notes(args));
  return yolo::train(o);
}

}  // namespace kestrel::cli
