// `kestrel detect`: the reference's detect.py. Sources are images, videos, folders, globs, .txt
// lists, stream URLs and webcams (yolo/data/detect_sources.h; videos and streams need a build
// with OpenCV videoio); each frame goes through the Detector, and is saved (the image under its
// own name, a video as <stem>.mp4) unless --nosave, and shown with --view-img.
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/detector.h"
#include "yolo/cli/predict_run.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/common/shipped_files.h"
#include "yolo/common/stop_signal.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/detect_sources.h"
#include "yolo/data/image_window.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

using yolo::data::SourceItem;

// The reference's flags in its order, then Kestrel's own.
const FlagTable kFlags = {
    {"weights", "W.pt", nullptr, "model weights: a YOLOv5 .pt, a Kestrel .safetensors or an .onnx (required)"},
    {"source", "SRC", nullptr, "image, video, folder, glob, .txt list, stream URL or webcam index (required)"},
    {"data", "D.yaml", "coco128.yaml",
     "class names for weights without their own (an .onnx without metadata, plain weights); the default names 80 classes only"},
    {"img-size", "H [W]", "640", "inference size, one side or height and width (also --img, --imgsz)"},
    {"conf-thres", "C", "0.25", "confidence threshold"},
    {"iou-thres", "IOU", "0.45", "NMS IoU threshold"},
    {"max-det", "N", "1000", "most detections per image"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"view-img", nullptr, nullptr, "show the results in a window"},
    {"save-txt", nullptr, nullptr, "save the detections to labels/*.txt"},
    {"save-conf", nullptr, nullptr, "with --save-txt: add each detection's confidence"},
    {"save-crop", nullptr, nullptr, "save each detected box as an image under crops/<class>/"},
    {"nosave", nullptr, nullptr, "do not save the annotated images and videos"},
    {"classes", "C [C ...]", nullptr, "keep only these classes: --classes 0, or --classes 0 2 3"},
    {"agnostic-nms", nullptr, nullptr, "class-agnostic NMS"},
    {"augment", nullptr, nullptr, "test-time augmentation: scales 1, 0.83 (mirrored), 0.67, as the reference's"},
    {"visualize", nullptr, nullptr, "each stage's first 32 feature maps per image, in <run>/<image>/stage*_features.png"},
    {"project", "DIR", "runs/detect", "results go to project/name"},
    {"name", "NAME", "exp", "results go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"line-thickness", "PIXELS", "3", "box line thickness"},
    {"hide-labels", nullptr, nullptr, "draw boxes without labels"},
    {"hide-conf", nullptr, nullptr, "draw labels without confidences"},
    {"update", nullptr, nullptr, "accepted with a note: Kestrel never rewrites a weights file (the reference strips its optimizer)"},
    {"half", nullptr, nullptr, "float16 inference on a GPU; bfloat16 on a CPU with AVX-512 BF16 or AMX"},
    {"tf32", "on|off", "on", "CUDA float32 convolutions on TF32 tensor cores, as PyTorch's default; off: FMA math only"},
    {"dnn", nullptr, nullptr, "accepted: .onnx weights always run in OpenCV DNN (on the CPU)"},
    {"vid-stride", "N", "1", "read every N-th video frame"},
    {"cfg", "M.yaml", nullptr, "model yaml, only for plain weights files (checkpoints carry their model)"},
    {"nc", "N", nullptr, "class count, only for plain weights files"}};

}  // namespace

const Command kDetectCommand = {
    "detect", "detect objects in images, videos and streams (reference detect.py)",
    "usage: kestrel detect --weights W.pt|W.safetensors|W.onnx --source SRC [--img-size 640 [W]]\n"
    "                      [--conf-thres 0.25] [--iou-thres 0.45] [--max-det 1000] [--device cpu|0]\n"
    "                      [--classes 0 [2 ...]] [--agnostic-nms] [--save-txt] [--save-conf]\n"
    "                      [--save-crop] [--nosave] [--view-img] [--line-thickness 3]\n"
    "                      [--hide-labels] [--hide-conf] [--vid-stride 1] [--project runs/detect]\n"
    "                      [--name exp] [--exist-ok] [--half] [--augment] [--visualize] [--dnn] [--tf32 on|off]\n"
    "                      [--data D.yaml] [--update] [--cfg M.yaml] [--nc N]\n"
    "  --visualize also writes each stage's output (.npy); --data also gives plain weights without --nc\n"
    "  their class count.\n"
    "  SRC: an image, a video, a folder, a glob ('imgs/**/*.jpg'), a .txt list of those, a stream\n"
    "  URL (rtsp://, rtmp://, http(s)://) or a webcam index (0). Videos and streams need a build\n"
    "  with OpenCV videoio; --view-img needs a display and a build with highgui.\n",
    run_detect, &kFlags};

namespace {

// The weights, with class names from them, --data, or (80 classes without names, as the
// reference's default --data coco128.yaml) COCO's.
InferenceModel load_detect_model(const Args& args, Device device) {
  const std::vector<std::string> data_names =
      args.has("data") ? yolo::data::load_dataset_names(yolo::find_shipped_file(args.get("data", ""), "--data"))
                       : std::vector<std::string>{};
  std::optional<int> nc = args.get_optional_int32("nc");
  if (!nc && !data_names.empty()) nc = static_cast<int>(data_names.size());
  InferenceModel im = load_inference_model(args.get("weights", ""), args.get("cfg", ""), nc, device, /*allow_onnx=*/true);
  im.names = label_names(std::move(im.names), data_names, im.nc(), args.get("data", ""));
  return im;
}

}  // namespace

int run_detect(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags), {"classes", "img-size"}, /*own=*/{"cfg", "nc"});
  const yolo::Console console(true);
  console.line(console.colour("detect: "), args.echo(kFlags, {"classes", "img-size"}));
  if (!args.has("weights") || !args.has("source")) throw UsageError("--weights and --source are required");
  const std::string source = args.get("source", "");
  const bool view_img = args.has("view-img");
  if (view_img) check_view_img();
  const int vid_stride = args.get_int32("vid-stride", 1);
  if (vid_stride < 1) throw UsageError("--vid-stride must be >= 1");
  if (args.has("update"))
    std::printf("--update: Kestrel reads weights files as they are and never rewrites them; nothing to "
                "update\n");
  const bool save_img = !args.has("nosave");
  DetectSettings s = predict_settings(args, save_img, view_img);
  std::vector<int> size = requested_size(args);

  // As the reference: the model first, then the sources.
  Device device = inference_device(args.get("device", ""));
  InferenceModel im = load_detect_model(args, device);
  set_augment(args.has("augment"), im);
  s.dtype = inference_dtype(args.has("half"), im, device);
  set_tf32(args.get("tf32", "on"), im);
  if (s.visualize && im.onnx) std::printf("WARNING: --visualize is ignored for ONNX weights (no stages to look into)\n");
  if (s.visualize && im.augment) std::printf("WARNING: --visualize is ignored with --augment, as in the reference\n");
  if (im.onnx) device = onnx_predict_settings(*im.onnx, device, size, s);
  const std::vector<SourceItem> items = yolo::data::expand_sources(source);
  check_sources(items);
  s.stride = im.stride();
  std::tie(s.img_h, s.img_w) = image_size(size, s.stride);
  // Claimed and held as train's run directory is: two runs never write into one (--exist-ok).
  const yolo::ClaimedRunDir claim =
      yolo::claim_run_dir(args.get("project", "runs/detect") + "/" + args.get("name", "exp"), args.has("exist-ok"));
  const std::string& save_dir = claim.path;
  if (s.save_txt) fs::create_directories(fs::path(save_dir) / "labels");
  Detector detector(std::move(im), s, device, save_dir);
  yolo::data::ImageWindows windows;
  const PredictOutputs out{save_img, view_img ? &windows : nullptr};
  const yolo::StopSignal stop;
  const ImageCounts counts = run_sources(detector, items, vid_stride, out, stop);
  report(counts, source, detector.times(), s, save_img, save_dir);
  return stop.received() ? 128 + stop.received() : 0;
}

}  // namespace kestrel::cli
