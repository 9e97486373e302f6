// `kestrel segment predict`: the reference v7.0's segment/predict.py (the family `kestrel segment`
// also holds train and val, segment/train.py and val.py: train_command.cpp, segment_val_command.cpp). Sources are
// detect's (yolo/data/detect_sources.h); each frame goes through the Segmenter, and is saved (the
// image under its own name, a video as <stem>.mp4) unless --nosave, and shown with --view-img. A
// -seg model's .onnx runs in OpenCV DNN on the CPU, each frame padded to the full size, as
// `kestrel detect` runs a detector's (yolo/cli/inference_model.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "layers/conv.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/cli/predict_run.h"
#include "yolo/cli/segmenter.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/common/shipped_files.h"
#include "yolo/data/dataset_config.h"
#include "yolo/model/segmentation_file.h"
#include "yolo/model/weights_file.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

// The reference's flags in its order.
const FlagTable kPredictFlags = {
    {"weights", "W.pt", nullptr, "a segmentation model: the reference's -seg .pt, a Kestrel .safetensors of one or "
                                 "its .onnx export (required)"},
    {"source", "SRC", nullptr, "image, video, folder, glob, .txt list, stream URL or webcam index (required)"},
    {"data", "D.yaml", "coco128.yaml", "class names for weights without their own; the default names 80 classes only"},
    {"img-size", "H [W]", "640", "inference size, one side or height and width (also --img, --imgsz)"},
    {"conf-thres", "C", "0.25", "confidence threshold"},
    {"iou-thres", "IOU", "0.45", "NMS IoU threshold"},
    {"max-det", "N", "1000", "most detections per image"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"view-img", nullptr, nullptr, "show the results in a window"},
    {"save-txt", nullptr, nullptr, "save each instance's outline to labels/*.txt (class, then x y pairs normalised)"},
    {"save-conf", nullptr, nullptr, "with --save-txt: add each instance's confidence"},
    {"save-crop", nullptr, nullptr, "save each detected box as an image under crops/<class>/"},
    {"nosave", nullptr, nullptr, "do not save the annotated images and videos"},
    {"classes", "C [C ...]", nullptr, "keep only these classes: --classes 0, or --classes 0 2 3"},
    {"agnostic-nms", nullptr, nullptr, "class-agnostic NMS"},
    {"augment", nullptr, nullptr, "refused: the reference's augmented forward drops the mask prototypes, so its segment/predict.py fails with it"},
    {"visualize", nullptr, nullptr, "accepted with a note: not available for segmentation models yet"},
    {"update", nullptr, nullptr, "accepted with a note: Kestrel never rewrites a weights file (the reference strips its optimizer)"},
    {"project", "DIR", "runs/predict-seg", "results go to project/name"},
    {"name", "NAME", "exp", "results go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"line-thickness", "PIXELS", "3", "box line thickness"},
    {"hide-labels", nullptr, nullptr, "draw boxes without labels"},
    {"hide-conf", nullptr, nullptr, "draw labels without confidences"},
    {"half", nullptr, nullptr, "float16 inference on a GPU (ignored on the CPU, as in the reference)"},
    {"dnn", nullptr, nullptr, "accepted: .onnx weights always run in OpenCV DNN (on the CPU)"},
    {"vid-stride", "N", "1", "read every N-th video frame"},
    {"retina-masks", nullptr, nullptr, "draw the masks at the image's own resolution (resized masks blended into it)"}};

// The notes and refusals of the flags that do not apply here; throws for --augment.
void check_unused_flags(const Args& args) {
  if (args.has("augment"))
    throw UsageError("--augment: the reference's segment/predict.py fails with it (its augmented forward keeps the "
                     "boxes and drops the mask prototypes); run without --augment");
  if (args.has("visualize"))
    std::printf("WARNING: --visualize is not available for segmentation models yet; predicting without it\n");
  if (args.has("update"))
    std::printf("--update: Kestrel reads weights files as they are and never rewrites them; nothing to update\n");
}

int largest_stride(const yolo::SegmentationModel& model) {
  return static_cast<int>(std::max(32.0, *std::max_element(model.strides().begin(), model.strides().end())));
}

}  // namespace

const Command kSegmentPredictCommand = {
    "predict", "instance masks of images, videos and streams (segment/predict.py)",
    "usage: kestrel segment predict --weights W.pt|W.safetensors|W.onnx --source SRC [--img-size 640 [W]]\n"
    "                               [--conf-thres 0.25] [--iou-thres 0.45] [--max-det 1000] [--device cpu|0]\n"
    "                               [--classes 0 [2 ...]] [--agnostic-nms] [--save-txt] [--save-conf]\n"
    "                               [--save-crop] [--nosave] [--view-img] [--line-thickness 3]\n"
    "                               [--hide-labels] [--hide-conf] [--vid-stride 1] [--retina-masks]\n"
    "                               [--project runs/predict-seg] [--name exp] [--exist-ok] [--half]\n"
    "                               [--dnn] [--data D.yaml]\n"
    "  W: a segmentation model (a Segment head): the reference's -seg .pt, a Kestrel .safetensors or\n"
    "  an .onnx export of one (run in OpenCV DNN on the CPU).\n"
    "  SRC: an image, a video, a folder, a glob ('imgs/**/*.jpg'), a .txt list of those, a stream\n"
    "  URL (rtsp://, rtmp://, http(s)://) or a webcam index (0). Videos and streams need a build\n"
    "  with OpenCV videoio; --view-img needs a display and a build with highgui.\n",
    run_segment_predict, &kPredictFlags};

const std::vector<const Command*>& segment_commands() {
  static const std::vector<const Command*> commands = {&kSegmentTrainCommand, &kSegmentValCommand, &kSegmentPredictCommand};
  return commands;
}

const Command kSegmentCommand = {
    "segment", "instance segmentation: train, val, predict (reference segment/*.py)",
    "usage: kestrel segment train|val|predict [flags]\n"
    "  train    train a -seg model on polygon labels (segment/train.py)\n"
    "  val      box and mask mAP of a -seg model on a dataset split (segment/val.py)\n"
    "  predict  instance masks of images, videos or streams with a -seg model (segment/predict.py)\n"
    "`kestrel segment train|val|predict --help` show their flags.\n",
    run_segment, nullptr, &segment_commands()};

int run_segment(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::printf("%s", kSegmentCommand.usage);
    return argv.empty() ? 2 : 0;
  }
  const Command* sub = nullptr;
  for (const Command* c : segment_commands())
    if (argv[0] == c->name) sub = c;
  if (!sub) {
    std::fprintf(stderr, "kestrel segment: unknown subcommand '%s'\n\n%s", argv[0].c_str(), kSegmentCommand.usage);
    return 2;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  for (const auto& a : rest)
    if (a == "--help" || a == "-h") {
      std::printf("%s", command_help(*sub).c_str());
      return 0;
    }
  try {
    return sub->run(rest);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kestrel segment %s: %s\n\n%s", sub->name, e.what(), sub->usage);
    return 2;
  }
}

int run_segment_predict(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kPredictFlags), {"classes", "img-size"});
  const yolo::Console console(true);
  console.line(console.colour("segment/predict: "), args.echo(kPredictFlags, {"classes", "img-size"}));
  if (!args.has("weights") || !args.has("source")) throw UsageError("--weights and --source are required");
  const std::string source = args.get("source", "");
  const bool view_img = args.has("view-img");
  if (view_img) check_view_img();
  const int vid_stride = args.get_int32("vid-stride", 1);
  if (vid_stride < 1) throw UsageError("--vid-stride must be >= 1");
  check_unused_flags(args);
  const bool save_img = !args.has("nosave");
  DetectSettings s = predict_settings(args, save_img, view_img);
  s.visualize = false;
  std::vector<int> size = requested_size(args);

  // As the reference: the model first, then the sources.
  Device device = inference_device(args.get("device", ""));
  const std::string weights = args.get("weights", "");
  std::shared_ptr<yolo::OnnxModel> onnx;
  yolo::LoadedSegmenter loaded;
  if (fs::is_regular_file(weights) && yolo::weights_format(weights) == yolo::WeightsFormat::kOnnx) {
    onnx = load_onnx_model(weights, /*segmentation=*/true);
    loaded.names = onnx->names();
  } else {
    loaded = yolo::load_segmentation_weights(weights, device);
    layers::fuse_convs(*loaded.model);  // as the reference's attempt_load(fuse=True)
    std::printf("Fusing layers... \n%s\n", loaded.model->summary(640, /*fused=*/true).c_str());
  }
  const std::vector<std::string> data_names =
      args.has("data") ? yolo::data::load_dataset_names(yolo::find_shipped_file(args.get("data", ""), "--data"))
                       : std::vector<std::string>{};
  // An ONNX graph of dynamic output says its classes through its names, if at all (0: unknown).
  const int64_t nc = loaded.model ? loaded.model->nc() : onnx->nc().value_or(static_cast<int64_t>(loaded.names.size()));
  std::vector<std::string> names = label_names(std::move(loaded.names), data_names, nc, args.get("data", ""));
  s.dtype = inference_dtype(args.has("half"), onnx != nullptr, device);
  if (onnx) device = onnx_predict_settings(*onnx, device, size, s);
  const std::vector<yolo::data::SourceItem> items = yolo::data::expand_sources(source);
  check_sources(items);
  s.stride = onnx ? std::max(32, onnx->stride().value_or(32)) : largest_stride(*loaded.model);
  std::tie(s.img_h, s.img_w) = image_size(size, s.stride);
  // Claimed and held as train's run directory is: two runs never write into one (--exist-ok).
  const yolo::ClaimedRunDir claim =
      yolo::claim_run_dir(args.get("project", "runs/predict-seg") + "/" + args.get("name", "exp"), args.has("exist-ok"));
  const std::string& save_dir = claim.path;
  if (s.save_txt) fs::create_directories(fs::path(save_dir) / "labels");
  const bool retina = args.has("retina-masks");
  Segmenter segmenter = onnx ? Segmenter(
                                   [onnx](const Tensor& x) {
                                     yolo::OnnxModel::SegmentOutputs out = onnx->predict_segmentation(x);
                                     return yolo::SegmentationModel::Prediction{std::move(out.boxes),
                                                                                std::move(out.protos), {}};
                                   },
                                   onnx->nm(), std::move(names), s, retina, device, save_dir)
                             : Segmenter(loaded.model, std::move(names), s, retina, device, save_dir);
  yolo::data::ImageWindows windows;
  const PredictOutputs out{save_img, view_img ? &windows : nullptr};
  const yolo::StopSignal stop;
  const ImageCounts counts = run_sources(segmenter, items, vid_stride, out, stop);
  report(counts, source, segmenter.times(), s, save_img, save_dir);
  return stop.received() ? 128 + stop.received() : 0;
}

}  // namespace kestrel::cli
