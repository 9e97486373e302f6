// `kestrel segment val`: the reference v7.0's segment/val.py on a dataset split: box and mask
// P, R, mAP50, mAP50-95 (yolo/eval/seg_validator.h). As the reference run on its own, the label
// masks are one full-size mask per instance (no overlap, mask ratio 1). A -seg model's .onnx runs
// in OpenCV DNN on the CPU, square images one at a time, as the reference's DetectMultiBackend runs
// it there and as `kestrel val` runs a detector's (yolo/cli/inference_model.h).
#include <cstdio>
#include <filesystem>
#include <thread>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/data/data_argument.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/loader.h"
#include "yolo/eval/seg_validator.h"
#include "yolo/model/model.h"
#include "yolo/model/segmentation_file.h"
#include "yolo/model/weights_file.h"

namespace kestrel::cli {
namespace {

// The reference's flags in its order.
const FlagTable kFlags = {
    {"data", "D.yaml", "coco128-seg.yaml", "dataset yaml with polygon labels (coco128-seg.yaml, ... by name)"},
    {"weights", "W.pt", nullptr, "a segmentation model: the reference's -seg .pt, a Kestrel .safetensors of one or "
                                 "its .onnx export (required)"},
    {"batch-size", "N", "32", "batch size"},
    {"img-size", "PIXELS", "640", "inference size (also --img, --imgsz)"},
    {"conf-thres", "C", "0.001", "confidence threshold"},
    {"iou-thres", "IOU", "0.6", "NMS IoU threshold"},
    {"max-det", "N", "300", "most detections per image"},
    {"task", "val|test|train", "val", "the split to validate"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"workers", "N", "8", "most data-loader workers"},
    {"single-cls", nullptr, nullptr, "treat the dataset as one class"},
    {"augment", nullptr, nullptr, "refused: the reference's augmented forward drops the mask prototypes"},
    {"verbose", nullptr, nullptr, "report mAP per class"},
    {"save-txt", nullptr, nullptr, "save the detections' boxes to labels/*.txt"},
    {"save-hybrid", nullptr, nullptr, "accepted with a note: Kestrel mixes no labels into the predictions; saves them as --save-txt"},
    {"save-conf", nullptr, nullptr, "with --save-txt: add each detection's confidence"},
    {"save-json", nullptr, nullptr, "save the detections with their masks (COCO RLE) as COCO JSON"},
    {"project", "DIR", "runs/val-seg", "results go to project/name"},
    {"name", "NAME", "exp", "results go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"half", nullptr, nullptr, "float16 inference on a GPU (ignored on the CPU, as in the reference)"},
    {"dnn", nullptr, nullptr, "accepted: .onnx weights always run in OpenCV DNN (on the CPU), square, batch 1"},
    {"coco-eval", nullptr, nullptr, "COCO's official box and mask mAP (pycocotools' COCOeval bbox and segm) on the "
                                    "detections, against --coco-gt or the labels' polygons (implies --save-json)"},
    {"coco-gt", "FILE", nullptr, "COCO ground-truth json for --coco-eval (implies it), evaluated on the split's images"}};

}  // namespace

const Command kSegmentValCommand = {
    "val", "validate a segmentation model: box and mask P, R, mAP50, mAP50-95 (reference segment/val.py)",
    "usage: kestrel segment val --weights W.pt|W.safetensors|W.onnx --data D.yaml [--img-size 640]\n"
    "                           [--batch-size 32] [--conf-thres 0.001] [--iou-thres 0.6] [--max-det 300]\n"
    "                           [--task val|test|train] [--device cpu|0] [--half] [--dnn] [--save-json]\n"
    "                           [--save-txt] [--save-conf] [--verbose] [--single-cls] [--workers 8]\n"
    "                           [--project runs/val-seg] [--name exp] [--exist-ok] [--coco-eval]\n"
    "                           [--coco-gt FILE]\n"
    "  With --save-json on COCO (val: coco/val2017.txt), as the reference: the detections' boxes and\n"
    "  masks are evaluated against <path>/annotations/instances_val2017.json (pycocotools' COCOeval\n"
    "  rules, bbox and segm, in Kestrel).\n",
    run_segment_val, &kFlags};

int run_segment_val(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags), /*lists=*/{}, /*own=*/{"coco-eval", "coco-gt"});
  const yolo::Console console(true);
  console.line(console.colour("segment/val: "), args.echo(kFlags));
  if (!args.has("weights")) throw UsageError("--weights is required");
  if (args.has("augment"))
    throw UsageError("--augment: the reference's segment/val.py cannot run it (its augmented forward keeps the "
                     "boxes and drops the mask prototypes); run without --augment");
  const std::string task = args.get("task", "val");
  if (task != "val" && task != "test" && task != "train") throw UsageError("--task must be val, test or train");
  yolo::SegValOptions vo;
  vo.img_size = args.get_int32("img-size", 640);
  vo.batch_size = args.get_int32("batch-size", 32);
  vo.conf_thres = args.get_double("conf-thres", 0.001);
  vo.iou_thres = args.get_double("iou-thres", 0.6);
  vo.max_det = args.get_int("max-det", 300);
  vo.single_cls = args.has("single-cls");
  vo.verbose = args.has("verbose");
  vo.save_json = args.has("save-json") || args.has("coco-eval") || args.has("coco-gt");
  vo.save_txt = args.has("save-txt") || args.has("save-hybrid");
  vo.save_conf = args.has("save-conf");
  vo.workers = args.get_int32("workers", 8);
  vo.plots = true;
  if (args.has("save-hybrid"))
    std::printf("--save-hybrid: Kestrel does not add the labels to the predictions (which changes the "
                "metrics); it validates as without it and saves the predictions as --save-txt does\n");
  if (vo.batch_size < 1 || vo.img_size < 32) throw UsageError("--batch-size >= 1 and --img-size >= 32");
  if (args.has("coco-gt") && !std::filesystem::is_regular_file(args.get("coco-gt", "")))
    throw UsageError("--coco-gt " + args.get("coco-gt", "") + ": no such file");
  if (vo.img_size > kMaxImageSize)
    throw UsageError("--img-size " + std::to_string(vo.img_size) + " is above the limit of " +
                     std::to_string(kMaxImageSize) + " pixels a side");

  // As the reference: the model first, then the dataset. A -seg model's .onnx (OpenCV DNN), else
  // its .pt or .safetensors.
  Device device = inference_device(args.get("device", ""));
  const std::string weights = args.get("weights", "");
  std::shared_ptr<yolo::OnnxModel> onnx;
  yolo::LoadedSegmenter loaded;
  if (std::filesystem::is_regular_file(weights) && yolo::weights_format(weights) == yolo::WeightsFormat::kOnnx) {
    onnx = load_onnx_model(weights, /*segmentation=*/true);
    loaded.names = onnx->names();
  } else {
    loaded = yolo::load_segmentation_weights(weights, device);
  }
  const std::string data = yolo::resolve_data(args.get("data", "coco128-seg.yaml"));
  const yolo::data::DatasetConfig dcfg = yolo::data::load_dataset_config(data);
  vo.compute_dtype = inference_dtype(args.has("half"), onnx != nullptr, device);
  // An ONNX graph of dynamic output says its classes through its names, if at all.
  const int model_nc = static_cast<int>(loaded.model ? loaded.model->nc()
                                        : onnx->nc() ? *onnx->nc()
                                        : loaded.names.empty() ? dcfg.nc : static_cast<int64_t>(loaded.names.size()));
  KESTREL_CHECK(vo.single_cls || model_nc == dcfg.nc, weights, " (", model_nc,
                " classes) was trained on different --data than ", dcfg.yaml_path, " (", dcfg.nc,
                " classes); pass weights and data that belong together");
  int stride = 32;  // the reference's gs: the largest stride, at least 32
  if (onnx) {
    stride = std::max(stride, onnx->stride().value_or(32));
  } else {
    for (double s : loaded.model->strides()) stride = std::max(stride, static_cast<int>(s));
  }
  const int rounded = static_cast<int>(yolo::make_divisible(vo.img_size, stride));
  if (rounded != vo.img_size)
    std::printf("WARNING: --img-size %d must be a multiple of the max stride %d, updating to %d\n", vo.img_size, stride,
                rounded);
  vo.img_size = rounded;
  // Square batches of one before the loader's workers are counted from the batch size.
  if (onnx) device = onnx_val_settings(*onnx, device, vo);
  const std::vector<std::string> names = loaded.names.empty() ? dcfg.names : loaded.names;
  const int nc = vo.single_cls ? 1 : dcfg.nc;
  vo.coco_ids = dcfg.val.size() == 1 && dcfg.val[0].ends_with("coco/val2017.txt");
  // COCO's official metric (yolo/eval/coco_eval.h), bbox and segm: --coco-eval against --coco-gt or
  // the labels; else, with --save-json, as the reference, the dataset's annotations file: always
  // on COCO (a warning when it is missing), elsewhere where it exists.
  if (vo.save_json) {
    vo.coco_eval = args.has("coco-eval") || args.has("coco-gt");
    if (args.has("coco-gt")) {
      vo.coco_gt = args.get("coco-gt", "");
    } else if (!vo.coco_eval) {
      const std::string annotations = (std::filesystem::path(dcfg.root) / "annotations/instances_val2017.json").string();
      if (vo.coco_ids || std::filesystem::exists(annotations)) vo.coco_gt = annotations;
    }
  }

  yolo::data::DatasetSplit split = yolo::data::load_split(dcfg, task, dcfg.nc, vo.single_cls, true, 0,
                                                          /*evaluation=*/true, /*polygons=*/true);
  std::printf("%s: %s\n", task.c_str(), split.summary.c_str());
  for (const auto& w : split.warnings) std::printf("%s: %s\n", task.c_str(), w.c_str());
  vo.workers = yolo::data::dataloader_workers(static_cast<int>(std::thread::hardware_concurrency()), 1, vo.batch_size,
                                              static_cast<int64_t>(split.records.size()), vo.workers);
  const yolo::ClaimedRunDir claim =
      yolo::claim_run_dir(args.get("project", "runs/val-seg") + "/" + args.get("name", "exp"), args.has("exist-ok"));
  vo.save_dir = claim.path;
  yolo::SegValidator validator(split.records, names, nc, vo, device, stride);
  validator.set_console(&console);
  const yolo::SegValResult result =
      onnx ? validator.run([&](const Tensor& x) {
        yolo::OnnxModel::SegmentOutputs out = onnx->predict_segmentation(x);
        return yolo::SegmentationModel::Prediction{std::move(out.boxes), std::move(out.protos), {}};
      })
           : validator.run(*loaded.model);
  std::printf("%s", result.table.c_str());
  std::printf("Results saved to %s\n", vo.save_dir.c_str());
  return 0;
}

}  // namespace kestrel::cli
