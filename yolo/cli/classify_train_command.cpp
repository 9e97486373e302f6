// `kestrel classify train`: the reference's classify/train.py flags, meanings and defaults.
#include <filesystem>

#include "dist/env.h"
#include "dist/launcher.h"
#include "dist/restart_policy.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/train/classify_trainer.h"

namespace kestrel::cli {
namespace {

// classify/train.py's flags in its order, then Kestrel's own.
const FlagTable kFlags = {
    {"model", "M.pt", "yolov5s-cls.pt", "initial weights: a -cls .pt, a detector .pt (cut at --cutoff), a .safetensors or a model yaml"},
    {"data", "DIR", "imagenette160", "dataset folder (train/<class>/*.jpg, val/<class>/*.jpg), a name under ../datasets, or a yaml"},
    {"epochs", "N", "10", "total training epochs"},
    {"batch-size", "N", "64", "total batch size"},
    {"img-size", "PIXELS", "224", "train and val image size (also --img, --imgsz)"},
    {"nosave", nullptr, nullptr, "only save the final checkpoint"},
    {"cache", "[ram|disk]", nullptr, "cache images in ram (the bare flag) or as .npy files beside them"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"workers", "N", "8", "most data-loader workers"},
    {"project", "DIR", "runs/train-cls", "save to project/name"},
    {"name", "NAME", "exp", "save to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"pretrained", "[BOOL]", "True", "start from --model's weights (--pretrained False: fresh weights)"},
    {"optimizer", "SGD|Adam|AdamW|RMSProp", "Adam", "optimizer"},
    {"lr0", "LR", "0.001", "initial learning rate"},
    {"decay", "WD", "5e-05", "weight decay"},
    {"label-smoothing", "EPS", "0.1", "label smoothing epsilon"},
    {"cutoff", "N", nullptr, "the layer a detector is cut at for the Classify head (default 10)"},
    {"dropout", "P", nullptr, "dropout before the head's Linear (fraction)"},
    {"verbose", nullptr, nullptr, "verbose mode"},
    {"seed", "N", "0", "global training seed"},
    {"local_rank", "N", "-1", "accepted for torch.distributed.run command lines (Kestrel's launcher sets ranks)"},
    {"noplots", nullptr, nullptr, "no train_images.jpg, test_images.jpg or results.png"},
    {"no-tensorboard", nullptr, nullptr, "no TensorBoard event file in the run directory"},
    {"amp", "bf16|fp16|off|bf16-emulated", "", "mixed precision, as train's (default: bf16 on sm_80+ GPUs, fp16 before, off on the CPU)"},
    {"resume", "[last.safetensors]", nullptr, "continue a stopped run: the newest weights/last.safetensors under --project, or the one given"},
    {"nproc-per-node", "N", "1", "data-parallel workers on this node (torch.distributed.run's flag)"},
    {"nnodes", "M", "1", "nodes of a multi-node job"},
    {"node-rank", "R", "0", "this node's rank in a multi-node job"},
    {"master-addr", "ADDR", "127.0.0.1", "rank 0's node address"},
    {"master-port", "PORT", "29500", "rank 0's rendezvous port"},
    {"max-restarts", "K", "0", "restart failed workers up to K times, resuming the newest last.safetensors (torchrun's flag)"},
    {"max-batches", "N", "0", "batches per epoch at most (0: all); for tests and benchmarks"}};

bool python_bool(const std::string& v, const char* flag) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  throw UsageError(std::string("--") + flag + " takes True or False, got '" + v + "'");
}

}  // namespace

const Command kClassifyTrainCommand = {
    "train", "train a classifier (classify/train.py)",
    "usage: kestrel classify train --model M.pt|M.yaml --data DIR [--epochs 10] [--batch-size 64] [--img-size 224]\n"
    "                              [--optimizer SGD|Adam|AdamW|RMSProp] [--lr0 0.001] [--decay 5e-05]\n"
    "                              [--label-smoothing 0.1] [--cutoff N] [--dropout P] [--pretrained [False]]\n"
    "                              [--cache [ram|disk]] [--device cpu|0] [--workers 8] [--seed 0] [--nosave]\n"
    "                              [--project runs/train-cls] [--name exp] [--exist-ok] [--noplots]\n",
    run_classify_train, &kFlags};

int run_classify_train(const std::vector<std::string>& argv) {
  // --cache and --pretrained take an optional value (argparse's nargs='?'): a bare flag before
  // another flag or at the end reads as its const.
  std::vector<std::string> words = argv;
  for (size_t i = 0; i < words.size(); ++i) {
    const bool bare = i + 1 == words.size() || words[i + 1].rfind("--", 0) == 0;
    if (bare && (words[i] == "--cache")) words.insert(words.begin() + static_cast<long>(++i), "ram");
    else if (bare && words[i] == "--pretrained") words.insert(words.begin() + static_cast<long>(++i), "True");
    else if (bare && words[i] == "--resume") words[i] = "--resume=";
  }
  Args args(words, flag_spec(kFlags), {},
            {"noplots", "max-batches", "resume", "no-tensorboard", "amp", "nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port",
             "max-restarts"});
  yolo::ClassifyTrainOptions o;
  o.model = args.get("model", o.model);
  o.data = args.get("data", o.data);
  o.epochs = args.get_int32("epochs", o.epochs);
  o.batch_size = args.get_int32("batch-size", o.batch_size);
  o.imgsz = args.get_int32("img-size", o.imgsz);
  o.nosave = args.has("nosave");
  o.cache = args.get("cache", "");
  o.device = args.get("device", "");
  o.workers = args.get_int32("workers", o.workers);
  o.project = args.get("project", o.project);
  o.name = args.get("name", o.name);
  o.exist_ok = args.has("exist-ok");
  o.pretrained = python_bool(args.get("pretrained", "True"), "pretrained");
  const std::string optimizer = args.get("optimizer", "Adam");
  if (optimizer != "SGD" && optimizer != "Adam" && optimizer != "AdamW" && optimizer != "RMSProp")
    throw UsageError("--optimizer must be one of SGD, Adam, AdamW, RMSProp, got '" + optimizer + "'");
  o.optimizer = yolo::parse_optimizer_kind(optimizer);
  o.lr0 = args.get_double("lr0", o.lr0);
  o.decay = args.get_double("decay", o.decay);
  o.label_smoothing = args.get_double("label-smoothing", o.label_smoothing);
  o.cutoff = args.get_optional_int32("cutoff");
  if (args.has("dropout")) o.dropout = args.get_double("dropout", 0.0);
  o.verbose = args.has("verbose");
  o.seed = args.get_int32("seed", 0);
  o.noplots = args.has("noplots");
  o.no_tensorboard = args.has("no-tensorboard");
  try {
    o.amp = yolo::parse_amp_mode(args.get("amp", ""));
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
  o.max_batches = args.get_int32("max-batches", 0);
  if (args.has("resume")) o.resume = args.get("resume", "");
  if (o.epochs < 1 || o.batch_size < 1) throw UsageError("--epochs and --batch-size must be at least 1");
  if (o.imgsz < 32 || o.imgsz > kMaxImageSize)
    throw UsageError("--img-size must be in [32, " + std::to_string(kMaxImageSize) + "]");
  // DDP: this process becomes the launcher of --nproc-per-node workers (a launcher's own workers
  // and torchrun's see their ranks in the environment and train); --max-restarts K restarts failed
  // workers, resuming the newest last.safetensors the run wrote (dist/restart_policy.h).
  const int nproc = args.get_int32("nproc-per-node", 1);
  if (nproc < 1) throw UsageError("--nproc-per-node must be >= 1");
  const int max_restarts = args.get_int32("max-restarts", 0);
  if (max_restarts < 0) throw UsageError("--max-restarts must be >= 0");
  if (dist::detect_launcher(dist::process_environment()).empty() && (nproc > 1 || args.has("nnodes") || max_restarts > 0)) {
    dist::LaunchOptions l;
    l.nproc_per_node = nproc;
    l.nnodes = args.get_int32("nnodes", 1);
    l.node_rank = args.get_int32("node-rank", 0);
    l.master_addr = args.get("master-addr", "127.0.0.1");
    l.master_port = args.get_int32("master-port", 29500);
    l.log_dir = o.project;
    if (o.batch_size % (nproc * l.nnodes) != 0)
      throw UsageError("--batch-size " + std::to_string(o.batch_size) + " must be a multiple of the world size " +
                       std::to_string(nproc * l.nnodes));
    l.command = {dist::current_executable().string(), "classify", "train"};
    for (const auto& a : dist::strip_launcher_flags(words)) l.command.push_back(a);
    if (max_restarts == 0) return dist::launch_workers(l).exit_code;
    const std::filesystem::path run_dir = yolo::increment_path(o.project + "/" + o.name, o.exist_ok);
    dist::RestartPolicy policy({l.command, o.project, run_dir.lexically_relative(o.project).string(), max_restarts});
    return dist::launch_workers(l, &policy).exit_code;
  }
  const yolo::Console console(dist::resolve_dist_options(dist::DistFlags{}, dist::process_environment()).rank == 0);
  console.line(console.colour("classify/train: "), args.echo(kFlags));
  return yolo::train_classifier(o);
}

}  // namespace kestrel::cli
