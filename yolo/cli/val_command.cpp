// `kestrel val`: the reference's val.py on a dataset split.
#include <cstdio>
#include <sstream>
#include <filesystem>
#include <thread>

#include "io/atomic_file.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/data/data_argument.h"
#include "yolo/data/dataset_config.h"
#include "yolo/eval/validator.h"
#include "yolo/plot/plots.h"

namespace kestrel::cli {
namespace {

// The reference's flags in its order, then Kestrel's own.
const FlagTable kFlags = {
    {"data", "D.yaml", "synthetic", "dataset yaml (coco128.yaml, ... by name), or the built-in synthetic set"},
    {"weights", "W.pt", nullptr, "weights to validate: a YOLOv5 .pt, a Kestrel .safetensors or an .onnx (required; "
                                 "several for --task speed and study)"},
    {"batch-size", "N", "32", "batch size"},
    {"img-size", "PIXELS", "640", "inference size (also --img, --imgsz)"},
    {"conf-thres", "C", "0.001", "confidence threshold"},
    {"iou-thres", "IOU", "0.6", "NMS IoU threshold"},
    {"max-det", "N", "300", "most detections per image"},
    {"task", "val|test|train|speed|study", "val", "the split to validate; speed: timings of each --weights (conf 0.25, "
                                                  "IoU 0.45, no plots); study: each --weights at 256..1536 into study_*.txt and study.png"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"workers", "N", "8", "most data-loader workers"},
    {"single-cls", nullptr, nullptr, "treat the dataset as one class"},
    {"augment", nullptr, nullptr, "test-time augmentation: scales 1, 0.83 (mirrored), 0.67, as the reference's"},
    {"verbose", nullptr, nullptr, "report mAP per class"},
    {"save-txt", nullptr, nullptr, "save the detections to labels/*.txt"},
    {"save-conf", nullptr, nullptr, "with --save-txt: add each detection's confidence"},
    {"save-json", nullptr, nullptr, "save the detections as COCO JSON"},
    {"save-hybrid", nullptr, nullptr, "accepted with a note: Kestrel mixes no labels into the predictions; saves them as --save-txt"},
    {"project", "DIR", "runs/val", "results go to project/name"},
    {"name", "NAME", "exp", "results go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"half", nullptr, nullptr, "float16 inference on a GPU; bfloat16 on a CPU with AVX-512 BF16 or AMX"},
    {"tf32", "on|off", "on", "CUDA float32 convolutions on TF32 tensor cores, as PyTorch's default; off: FMA math only"},
    {"dnn", nullptr, nullptr, "accepted: .onnx weights always run in OpenCV DNN (on the CPU), square, batch 1"},
    {"cfg", "M.yaml", nullptr, "model yaml, only for plain weights files (checkpoints carry their model)"},
    {"nc", "N", nullptr, "class count, only for plain weights files"},
    {"coco-eval", nullptr, nullptr, "COCO's official mAP (pycocotools' COCOeval rules) on the detections, against --coco-gt or "
                                    "else the labels; prints its 12 lines, its AP and AP50 become mAP50-95 and mAP50 (implies --save-json)"},
    {"coco-gt", "FILE", nullptr, "COCO ground-truth json for --coco-eval (implies it), evaluated on the split's images"}};

}  // namespace

const Command kValCommand = {
    "val", "validate weights on a dataset: P, R, mAP50, mAP50-95 (reference val.py)",
    "usage: kestrel val --weights W.pt|W.safetensors|W.onnx --data D.yaml|synthetic [--img-size 640]\n"
    "                   [--batch-size 32] [--conf-thres 0.001] [--iou-thres 0.6]\n"
    "                   [--task val|test|train] [--device cpu|0] [--half] [--augment] [--dnn] [--tf32 on|off]\n"
    "                   [--save-json] [--save-txt] [--save-conf] [--save-hybrid] [--verbose] [--single-cls]\n"
    "                   [--max-det 300] [--workers 8] [--cfg M.yaml] [--nc N] [--project runs/val]\n"
    "                   [--name exp] [--exist-ok] [--coco-eval] [--coco-gt FILE]\n"
    "  --cfg/--nc are only needed for plain weights files (checkpoints carry their model).\n"
    "  With --save-json on COCO (val: coco/val2017.txt), as the reference: the detections are evaluated\n"
    "  against <path>/annotations/instances_val2017.json (pycocotools' COCOeval rules, in Kestrel).\n",
    run_val, &kFlags};

namespace {

// One validation of `weights` with `vo` on `task`'s split, as the reference's run(): the device
// line, the model, the dataset's split, a run directory of its own, the table. The caller set
// vo's thresholds, sizes and switches from the flags.
yolo::ValResult validate_once(const Args& args, const std::string& weights, yolo::ValOptions vo, const std::string& task,
                              bool half, const yolo::Console& console) {
  Device device = inference_device(args.get("device", ""));
  const std::string data = yolo::resolve_data(args.get("data", "synthetic"));
  const yolo::data::DatasetConfig dcfg = yolo::data::load_dataset_config(data);
  std::optional<int> nc = args.get_optional_int32("nc");
  if (!nc) nc = vo.single_cls ? 1 : dcfg.nc;  // a checkpoint's own class count wins
  InferenceModel im = load_inference_model(weights, args.get("cfg", ""), nc, device, /*allow_onnx=*/true);
  set_augment(args.has("augment"), im);
  vo.compute_dtype = inference_dtype(half, im, device);
  set_tf32(args.get("tf32", "on"), im);
  vo.augment = im.augment;
  if (im.onnx) device = onnx_val_settings(*im.onnx, device, vo);
  const int model_nc = static_cast<int>(im.onnx && !im.onnx->nc() ? dcfg.nc : im.nc());
  KESTREL_CHECK(vo.single_cls || model_nc == dcfg.nc, "the weights predict ", model_nc, " classes but ",
                dcfg.yaml_path, " has ", dcfg.nc, "; use the dataset they were trained on");
  const std::vector<std::string> names = im.names.empty() ? dcfg.names : im.names;
  // As the reference: COCO's 91 category ids only when validating on COCO's own val2017.txt.
  vo.coco_ids = dcfg.val.size() == 1 && dcfg.val[0].ends_with("coco/val2017.txt");
  // COCO's official metric (yolo/eval/coco_eval.h): --coco-eval against --coco-gt or the labels;
  // else, as the reference with --save-json (on by itself for coco.yaml), the dataset's
  // annotations file: always on COCO (a warning when it is missing), elsewhere where it exists.
  if (vo.save_json) {
    vo.coco_eval = args.has("coco-eval") || args.has("coco-gt");
    vo.save_json = vo.save_json || vo.coco_eval || data.ends_with("coco.yaml");
    if (args.has("coco-gt")) {
      vo.coco_gt = args.get("coco-gt", "");
    } else if (!vo.coco_eval) {
      const std::string annotations = (std::filesystem::path(dcfg.root) / "annotations/instances_val2017.json").string();
      if (vo.coco_ids || std::filesystem::exists(annotations)) vo.coco_gt = annotations;
    }
  }

  yolo::data::DatasetSplit split = yolo::data::load_split(dcfg, task, dcfg.nc, vo.single_cls, true, 0,
                                                          /*evaluation=*/true);
  std::printf("%s: %s\n", task.c_str(), split.summary.c_str());
  for (const auto& w : split.warnings) std::printf("%s: %s\n", task.c_str(), w.c_str());
  // val.py's loader: min(cores, batch (none for 1), --workers) threads (data/loader.h).
  vo.workers = yolo::data::dataloader_workers(static_cast<int>(std::thread::hardware_concurrency()), 1, vo.batch_size,
                                              static_cast<int64_t>(split.records.size()), vo.workers);
  const std::string project = args.get("project", "runs/val");
  // Claimed and held as train's run directory is: two runs never write into one (--exist-ok).
  const yolo::ClaimedRunDir claim = yolo::claim_run_dir(project + "/" + args.get("name", "exp"), args.has("exist-ok"));
  vo.save_dir = claim.path;
  yolo::Validator validator(split.records, names, model_nc, vo, device, im.stride());
  validator.set_console(&console);
  const yolo::ValResult result =
      im.model ? validator.run(*im.model) : validator.run([&](const Tensor& x) { return im.predict(x); });
  std::printf("%s", result.table.c_str());
  std::printf("Results saved to %s\n", vo.save_dir.c_str());
  return result;
}

// The --weights list of --task speed and study (one or more, as the reference's nargs='+').
std::vector<std::string> weights_list(const Args& args) {
  std::vector<std::string> out;
  std::stringstream ss(args.get("weights", ""));
  for (std::string w; std::getline(ss, w, ',');)
    if (!w.empty()) out.push_back(w);
  return out;
}

// val.py --task study: each weights at 256, 384, ..., 1536; a row per size of P, R, mAP50,
// mAP50-95, the three losses and the three timings (np.savetxt's '%10.4g' separated by spaces) in
// study_<data>_<weights>.txt, and study.png of every such file in the current folder.
int run_study(const Args& args, const yolo::ValOptions& base, bool half, const yolo::Console& console) {
  const std::string data_stem = std::filesystem::path(args.get("data", "synthetic")).stem().string();
  for (const std::string& weights : weights_list(args)) {
    const std::string file = "study_" + data_stem + "_" + std::filesystem::path(weights).stem().string() + ".txt";
    std::string rows;
    for (int size = 256; size <= 1536; size += 128) {
      std::printf("\nRunning %s --imgsz %d...\n", file.c_str(), size);
      yolo::ValOptions vo = base;
      vo.img_size = size;
      vo.plots = false;
      const yolo::ValResult r = validate_once(args, weights, vo, "val", half, console);
      const yolo::ValMetrics& m = r.metrics;
      char cell[32];
      std::string row;
      for (double v : {m.mp, m.mr, m.map50, m.map, r.box_loss, r.obj_loss, r.cls_loss, r.ms_pre, r.ms_inf, r.ms_nms}) {
        std::snprintf(cell, sizeof cell, "%10.4g", v);
        if (!row.empty()) row += ' ';
        row += cell;
      }
      rows += row + "\n";
    }
    write_file_atomic(file, rows);
    std::printf("Saved %s\n", file.c_str());
  }
  yolo::plot_val_study(".", "study.png");
  std::printf("Saved study.png\n");
  return 0;
}

}  // namespace

int run_val(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags), /*lists=*/{"weights"}, /*own=*/{"cfg", "nc", "coco-eval", "coco-gt"});
  const yolo::Console console(true);
  console.line(console.colour("val: "), args.echo(kFlags));
  if (!args.has("weights")) throw UsageError("--weights is required");
  const std::string task = args.get("task", "val");
  const bool benchmark = task == "speed" || task == "study";
  if (task != "val" && task != "test" && task != "train" && !benchmark)
    throw UsageError("--task must be val, test, train, speed or study");
  if (!benchmark && weights_list(args).size() > 1)
    throw UsageError("several --weights are for --task speed and study; validate one at a time");
  yolo::ValOptions vo;
  vo.img_size = args.get_int32("img-size", 640);
  vo.batch_size = args.get_int32("batch-size", 32);
  vo.conf_thres = args.get_double("conf-thres", 0.001);
  vo.iou_thres = args.get_double("iou-thres", 0.6);
  vo.max_det = args.get_int("max-det", 300);
  vo.single_cls = args.has("single-cls");
  vo.verbose = args.has("verbose");
  vo.save_json = args.has("save-json") || args.has("coco-eval") || args.has("coco-gt");
  vo.save_txt = args.has("save-txt") || args.has("save-hybrid");  // the reference's save_txt |= save_hybrid
  if (args.has("save-hybrid"))
    std::printf("--save-hybrid: Kestrel does not add the labels to the predictions (which changes the "
                "metrics); it validates as without it and saves the predictions as --save-txt does\n");
  vo.save_conf = args.has("save-conf");  // as the reference: only with --save-txt
  vo.workers = args.get_int32("workers", 8);
  vo.plots = true;
  if (vo.batch_size < 1 || vo.img_size < 32) throw UsageError("--batch-size >= 1 and --img-size >= 32");
  if (vo.img_size > kMaxImageSize)
    throw UsageError("--img-size " + std::to_string(vo.img_size) + " is above the limit of " +
                     std::to_string(kMaxImageSize) + " pixels a side");
  if (args.has("coco-gt") && !std::filesystem::is_regular_file(args.get("coco-gt", "")))
    throw UsageError("--coco-gt " + args.get("coco-gt", "") + ": no such file");
  if (!benchmark) {
    validate_once(args, args.get("weights", ""), vo, task, args.has("half"), console);
    return 0;
  }
  // As the reference's benchmarks: float16 where there is a GPU (not asked for), the val split.
  const bool half = cuda_available() && args.get("device", "") != "cpu";
  if (task == "speed") {  // timings: the reference's thresholds, no JSON, no plots
    vo.conf_thres = 0.25, vo.iou_thres = 0.45, vo.save_json = false, vo.plots = false;
    for (const std::string& weights : weights_list(args)) validate_once(args, weights, vo, "val", half, console);
    return 0;
  }
  return run_study(args, vo, half, console);
}

}  // namespace kestrel::cli
