// `kestrel detect`: the reference's detect.py. Sources are images, videos, folders, globs, .txt
// lists, stream URLs and webcams (yolo/data/detect_sources.h; videos and streams need a build
// with OpenCV videoio); each frame goes through the Detector, and is saved (the image under its
// own name, a video as <stem>.mp4) unless --nosave, and shown with --view-img.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/detector.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/common/shipped_files.h"
#include "yolo/common/stop_signal.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/detect_sources.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/image_window.h"
#include "yolo/data/video_io.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

using yolo::data::SourceItem;
using yolo::data::SourceKind;

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
    {"half", nullptr, nullptr, "float16 inference on a GPU (ignored on the CPU, as in the reference)"},
    {"dnn", nullptr, nullptr, "accepted: .onnx weights always run in OpenCV DNN (on the CPU)"},
    {"vid-stride", "N", "1", "read every N-th video frame"},
    {"cfg", "M.yaml", nullptr, "model yaml, only for plain weights files (checkpoints carry their model)"},
    {"nc", "N", nullptr, "class count, only for plain weights files"}};

// --img-size H [W] (one size is square).
std::vector<int> requested_size(const Args& args) {
  std::vector<int> size = {640};
  if (args.has("img-size")) size = args.get_int_list("img-size");  // also --img, --imgsz (Args)
  if (size.size() == 1) size.push_back(size[0]);
  if (size.size() != 2 || size[0] < 1 || size[1] < 1)
    throw UsageError("--img-size takes one or two positive sizes (height width), e.g. 640 or 480 640");
  if (size[0] > kMaxImageSize || size[1] > kMaxImageSize)
    throw UsageError("--img-size " + std::to_string(size[0]) + " " + std::to_string(size[1]) +
                     " is above the limit of " + std::to_string(kMaxImageSize) + " pixels a side");
  return size;
}

// The size rounded up to multiples of the stride, as the reference's check_img_size.
std::pair<int, int> image_size(const std::vector<int>& size, int stride) {
  std::vector<int> fixed = size;
  for (int& s : fixed) s = (s + stride - 1) / stride * stride;
  if (fixed != size)
    std::printf("WARNING: --img-size %d %d must be a multiple of the max stride %d, updating to %d %d\n",
                size[0], size[1], stride, fixed[0], fixed[1]);
  return {fixed[0], fixed[1]};
}

// An ONNX graph's settings, as the reference runs weights other than PyTorch's: on the CPU here
// (OpenCV DNN), each frame padded to the full size (no minimal padding), a fixed-size export at
// its own size. Returns the device the frames go to.
Device onnx_settings(const yolo::OnnxModel& onnx, Device device, std::vector<int>& size, DetectSettings& s) {
  if (device.is_cuda()) std::printf("WARNING: ONNX weights run in OpenCV DNN on the CPU, not on %s\n", device.str().c_str());
  s.letterbox_auto = false;
  if (onnx.height() && onnx.width()) {
    const std::vector<int> fixed = {static_cast<int>(*onnx.height()), static_cast<int>(*onnx.width())};
    if (fixed != size)
      std::printf("WARNING: '%s' is a fixed-size export for %dx%d images: detecting at that size, not --img-size %d %d\n",
                  onnx.path().c_str(), fixed[0], fixed[1], size[0], size[1]);
    size = fixed;
  }
  return Device::cpu();
}

// The annotated image under its own name (other formats than JPEG and PNG are saved as JPEG).
void save_image(const fs::path& save_dir, const std::string& path, const cv::Mat& image) {
  yolo::data::write_image((save_dir / fs::path(path).filename()).string(), image);
}

struct Outputs {
  bool save_img = true;
  yolo::data::ImageWindows* windows = nullptr;  // --view-img
};

// Frames of one video or stream, each detected, then written to <save_dir>/<name>.mp4 and shown,
// until the source ends or a stop signal arrives (the .mp4 is finalised either way).
void run_video(Detector& detector, const SourceItem& item, const std::string& prefix, int stride,
               const Outputs& out, const yolo::StopSignal& stop) {
  yolo::data::VideoReader reader(item.path, stride);
  const bool stream = item.kind == SourceKind::kStream;
  const std::string stem = fs::path(item.path).stem().string();
  std::unique_ptr<yolo::data::VideoWriter> writer;
  cv::Mat frame;
  for (int64_t n = 0; reader.read(frame); ++n) {
    // Videos count frames from 1, streams from 0, in the reference's label file names.
    const int64_t index = stream ? n : n + 1;
    const std::string tail = detector.process(frame, str(stem, "_", index), stem);
    if (stream)
      std::printf("%s%s\n", prefix.c_str(), tail.c_str());
    else
      std::printf("%s(%lld/%lld) %s: %s\n", prefix.c_str(), static_cast<long long>(index),
                  static_cast<long long>(reader.frames()), item.path.c_str(), tail.c_str());
    std::fflush(stdout);
    if (out.windows) out.windows->show(item.path, frame);
    if (out.save_img) {
      if (!writer) {  // the reference: the source's fps and size for videos, 30 fps for streams
        const fs::path path = (fs::path(detector.save_dir()) / fs::path(item.path).filename()).replace_extension(".mp4");
        writer = std::make_unique<yolo::data::VideoWriter>(path.string(), stream ? 30.0 : reader.fps(),
                                                           frame.cols, frame.rows);
      }
      writer->write(frame);
    }
    if (stop.received()) return;
  }
}

}  // namespace

const Command kDetectCommand = {
    "detect", "detect objects in images, videos and streams (reference detect.py)",
    "usage: kestrel detect --weights W.pt|W.safetensors|W.onnx --source SRC [--img-size 640 [W]]\n"
    "                      [--conf-thres 0.25] [--iou-thres 0.45] [--max-det 1000] [--device cpu|0]\n"
    "                      [--classes 0 [2 ...]] [--agnostic-nms] [--save-txt] [--save-conf]\n"
    "                      [--save-crop] [--nosave] [--view-img] [--line-thickness 3]\n"
    "                      [--hide-labels] [--hide-conf] [--vid-stride 1] [--project runs/detect]\n"
    "                      [--name exp] [--exist-ok] [--half] [--augment] [--visualize] [--dnn]\n"
    "                      [--data D.yaml] [--update] [--cfg M.yaml] [--nc N]\n"
    "  --visualize also writes each stage's output (.npy); --data also gives plain weights without --nc\n"
    "  their class count.\n"
    "  SRC: an image, a video, a folder, a glob ('imgs/**/*.jpg'), a .txt list of those, a stream\n"
    "  URL (rtsp://, rtmp://, http(s)://) or a webcam index (0). Videos and streams need a build\n"
    "  with OpenCV videoio; --view-img needs a display and a build with highgui.\n",
    run_detect, &kFlags};

namespace {

// The drawing, saving and NMS settings of the flags.
DetectSettings detect_settings(const Args& args, bool save_img, bool view_img) {
  DetectSettings s;
  s.nms.conf_thres = args.get_double("conf-thres", 0.25);
  s.nms.iou_thres = args.get_double("iou-thres", 0.45);
  s.nms.max_det = args.get_int("max-det", 1000);
  s.nms.classes = args.get_int_list("classes");
  s.nms.agnostic = args.has("agnostic-nms");
  s.save_txt = args.has("save-txt");
  s.save_conf = args.has("save-conf");
  s.save_crop = args.has("save-crop");
  s.hide_labels = args.has("hide-labels");
  s.hide_conf = args.has("hide-conf");
  s.line_thickness = args.get_int32("line-thickness", 3);
  s.draw = save_img || view_img;
  s.visualize = args.has("visualize");
  return s;
}

// The weights, with class names from them, --data, or (80 classes without names, as the
// reference's default --data coco128.yaml) COCO's.
InferenceModel load_detect_model(const Args& args, Device device) {
  const std::vector<std::string> data_names =
      args.has("data") ? yolo::data::load_dataset_names(yolo::find_shipped_file(args.get("data", ""), "--data"))
                       : std::vector<std::string>{};
  std::optional<int> nc = args.get_optional_int32("nc");
  if (!nc && !data_names.empty()) nc = static_cast<int>(data_names.size());
  InferenceModel im = load_inference_model(args.get("weights", ""), args.get("cfg", ""), nc, device, /*allow_onnx=*/true);
  if (im.names.empty() && !data_names.empty()) {
    KESTREL_CHECK(im.nc() == 0 || im.nc() == static_cast<int64_t>(data_names.size()), "--data ", args.get("data", ""),
                  " names ", data_names.size(), " classes, but the weights predict ", im.nc());
    im.names = data_names;
  }
  if (im.names.empty() && data_names.empty() && im.nc() == 80)
    im.names = yolo::data::load_dataset_names(yolo::find_shipped_file("coco128.yaml", "--data"));
  return im;
}

// Videos and streams need OpenCV videoio: say so before anything runs.
void check_sources(const std::vector<SourceItem>& items) {
  for (const SourceItem& item : items)
    KESTREL_CHECK(item.kind == SourceKind::kImage || yolo::data::video_io_available(), "--source: '",
                  item.path, "' is a ", item.kind == SourceKind::kVideo ? "video" : "stream",
                  ", and this kestrel was built without OpenCV videoio, which reads them; install "
                  "libopencv-videoio-dev and rebuild (CMake finds it), or extract the frames first "
                  "(ffmpeg -i VIDEO frames/%06d.jpg) and pass the folder");
}

struct ImageCounts {
  size_t images = 0, skipped = 0;
};

// Every source in turn, until a signal; an unreadable image is skipped (and counted), as one bad
// file in a folder must not cost the results of all the others.
ImageCounts run_sources(Detector& detector, const std::vector<SourceItem>& items, int vid_stride,
                        const Outputs& out, const std::string& save_dir, const yolo::StopSignal& stop) {
  ImageCounts c;
  size_t streams = 0;
  for (size_t k = 0; k < items.size() && !stop.received(); ++k) {
    const SourceItem& item = items[k];
    const std::string count = str(k + 1, "/", items.size(), " ");
    if (item.kind == SourceKind::kVideo) {
      run_video(detector, item, "video " + count, vid_stride, out, stop);
      continue;
    }
    if (item.kind == SourceKind::kStream) {
      run_video(detector, item, str(streams++, ": "), vid_stride, out, stop);
      continue;
    }
    ++c.images;
    cv::Mat frame;
    std::string damage;
    try {
      frame = yolo::data::read_image(item.path, &damage);
    } catch (const Error& e) {
      std::fprintf(stderr, "WARNING: skipping %s: %s\n", item.path.c_str(), e.what());
      ++c.skipped;
      continue;
    }
    if (!damage.empty())
      std::fprintf(stderr, "WARNING: %s: corrupt JPEG restored (%s); what is missing is grey\n",
                   item.path.c_str(), damage.c_str());
    const std::string stem = fs::path(item.path).stem().string();
    const std::string tail = detector.process(frame, stem, stem);
    std::printf("image %s%s: %s\n", count.c_str(), item.path.c_str(), tail.c_str());
    if (out.windows) out.windows->show(item.path, frame);
    if (out.save_img) save_image(save_dir, item.path, frame);
  }
  return c;
}

// The reference's closing lines: skipped files, the speed line, where the results went.
void report(const ImageCounts& c, const std::string& source, const DetectTimes& t, const DetectSettings& s,
            bool save_img, const std::string& save_dir) {
  const char* files = c.skipped == 1 ? "file" : "files";
  if (c.skipped > 0) std::printf("%zu %s skipped (unreadable or corrupt, see the warnings above)\n", c.skipped, files);
  KESTREL_CHECK(c.images == 0 || c.skipped < c.images, "no image of --source '", source, "' could be read (",
                c.skipped, " ", files, " skipped); check the files named above");
  const double n = static_cast<double>(std::max<int64_t>(t.frames, 1));
  std::printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (1, 3, %d, %d)\n",
              t.pre / n, t.inference / n, t.nms / n, s.img_h, s.img_w);
  if (!s.save_txt && !save_img) return;
  std::printf("Results saved to %s\n", save_dir.c_str());
  if (s.save_txt) {
    size_t labels = 0;
    for (const auto& e : fs::directory_iterator(fs::path(save_dir) / "labels")) labels += e.path().extension() == ".txt";
    std::printf("%zu labels saved to %s/labels\n", labels, save_dir.c_str());
  }
}

}  // namespace

int run_detect(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags), {"classes", "img-size"}, /*own=*/{"cfg", "nc"});
  const yolo::Console console(true);
  console.line(console.colour("detect: "), args.echo(kFlags, {"classes", "img-size"}));
  if (!args.has("weights") || !args.has("source")) throw UsageError("--weights and --source are required");
  const std::string source = args.get("source", "");
  const bool view_img = args.has("view-img");
  if (view_img) {
    const std::string why = yolo::data::view_unavailable_reason(std::getenv("DISPLAY"), std::getenv("WAYLAND_DISPLAY"));
    if (!why.empty()) throw UsageError("--view-img: " + why);
  }
  const int vid_stride = args.get_int32("vid-stride", 1);
  if (vid_stride < 1) throw UsageError("--vid-stride must be >= 1");
  if (args.has("update"))
    std::printf("--update: Kestrel reads weights files as they are and never rewrites them; nothing to "
                "update\n");
  const bool save_img = !args.has("nosave");
  DetectSettings s = detect_settings(args, save_img, view_img);
  std::vector<int> size = requested_size(args);

  // As the reference: the model first, then the sources.
  Device device = inference_device(args.get("device", ""));
  InferenceModel im = load_detect_model(args, device);
  s.dtype = inference_dtype(args.has("half"), im, device);
  set_augment(args.has("augment"), im);
  if (s.visualize && im.onnx) std::printf("WARNING: --visualize is ignored for ONNX weights (no stages to look into)\n");
  if (s.visualize && im.augment) std::printf("WARNING: --visualize is ignored with --augment, as in the reference\n");
  if (im.onnx) device = onnx_settings(*im.onnx, device, size, s);
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
  const Outputs out{save_img, view_img ? &windows : nullptr};
  const yolo::StopSignal stop;
  const ImageCounts counts = run_sources(detector, items, vid_stride, out, save_dir, stop);
  report(counts, source, detector.times(), s, save_img, save_dir);
  return stop.received() ? 128 + stop.received() : 0;
}

}  // namespace kestrel::cli
