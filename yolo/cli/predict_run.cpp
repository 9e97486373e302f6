#include "yolo/cli/predict_run.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "base/error.h"
#include "yolo/common/shipped_files.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/video_io.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

using yolo::data::SourceItem;
using yolo::data::SourceKind;

// The annotated image under its own name (other formats than JPEG and PNG are saved as JPEG).
void save_image(const fs::path& save_dir, const std::string& path, const cv::Mat& image) {
  yolo::data::write_image((save_dir / fs::path(path).filename()).string(), image);
}

// Frames of one video or stream, each predicted, then written to <save_dir>/<name>.mp4 and shown,
// until the source ends or a stop signal arrives (the .mp4 is finalised either way).
void run_video(FramePredictor& predictor, const SourceItem& item, const std::string& prefix, int stride,
               const PredictOutputs& out, const yolo::StopSignal& stop) {
  yolo::data::VideoReader reader(item.path, stride);
  const bool stream = item.kind == SourceKind::kStream;
  const std::string stem = fs::path(item.path).stem().string();
  std::unique_ptr<yolo::data::VideoWriter> writer;
  cv::Mat frame;
  for (int64_t n = 0; reader.read(frame); ++n) {
    // Videos count frames from 1, streams from 0, in the reference's label file names.
    const int64_t index = stream ? n : n + 1;
    const std::string tail = predictor.process(frame, str(stem, "_", index), stem);
    if (stream)
      std::printf("%s%s\n", prefix.c_str(), tail.c_str());
    else
      std::printf("%s(%lld/%lld) %s: %s\n", prefix.c_str(), static_cast<long long>(index),
                  static_cast<long long>(reader.frames()), item.path.c_str(), tail.c_str());
    std::fflush(stdout);
    if (out.windows) out.windows->show(item.path, frame);
    if (out.save_img) {
      if (!writer) {  // the reference: the source's fps and size for videos, 30 fps for streams
        const fs::path path =
            (fs::path(predictor.save_dir()) / fs::path(item.path).filename()).replace_extension(".mp4");
        writer = std::make_unique<yolo::data::VideoWriter>(path.string(), stream ? 30.0 : reader.fps(),
                                                           frame.cols, frame.rows);
      }
      writer->write(frame);
    }
    if (stop.received()) return;
  }
}

}  // namespace

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

std::pair<int, int> image_size(const std::vector<int>& size, int stride) {
  std::vector<int> fixed = size;
  for (int& s : fixed) s = (s + stride - 1) / stride * stride;
  if (fixed != size)
    std::printf("WARNING: --img-size %d %d must be a multiple of the max stride %d, updating to %d %d\n",
                size[0], size[1], stride, fixed[0], fixed[1]);
  return {fixed[0], fixed[1]};
}

DetectSettings predict_settings(const Args& args, bool save_img, bool view_img) {
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

std::vector<std::string> label_names(std::vector<std::string> own, const std::vector<std::string>& data_names,
                                     int64_t nc, const std::string& data_flag) {
  if (!own.empty()) return own;
  if (!data_names.empty()) {
    KESTREL_CHECK(nc == 0 || nc == static_cast<int64_t>(data_names.size()), "--data ", data_flag, " names ",
                  data_names.size(), " classes, but the weights predict ", nc);
    return data_names;
  }
  if (nc == 80) return yolo::data::load_dataset_names(yolo::find_shipped_file("coco128.yaml", "--data"));
  return {};
}

void check_view_img() {
  const std::string why = yolo::data::view_unavailable_reason(std::getenv("DISPLAY"), std::getenv("WAYLAND_DISPLAY"));
  if (!why.empty()) throw UsageError("--view-img: " + why);
}

void check_sources(const std::vector<SourceItem>& items) {
  for (const SourceItem& item : items)
    KESTREL_CHECK(item.kind == SourceKind::kImage || yolo::data::video_io_available(), "--source: '",
                  item.path, "' is a ", item.kind == SourceKind::kVideo ? "video" : "stream",
                  ", and this kestrel was built without OpenCV videoio, which reads them; install "
                  "libopencv-videoio-dev and rebuild (CMake finds it), or extract the frames first "
                  "(ffmpeg -i VIDEO frames/%06d.jpg) and pass the folder");
}

ImageCounts run_sources(FramePredictor& predictor, const std::vector<SourceItem>& items, int vid_stride,
                        const PredictOutputs& out, const yolo::StopSignal& stop) {
  ImageCounts c;
  size_t streams = 0;
  for (size_t k = 0; k < items.size() && !stop.received(); ++k) {
    const SourceItem& item = items[k];
    const std::string count = str(k + 1, "/", items.size(), " ");
    if (item.kind == SourceKind::kVideo) {
      run_video(predictor, item, "video " + count, vid_stride, out, stop);
      continue;
    }
    if (item.kind == SourceKind::kStream) {
      run_video(predictor, item, str(streams++, ": "), vid_stride, out, stop);
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
    const std::string tail = predictor.process(frame, stem, stem);
    std::printf("image %s%s: %s\n", count.c_str(), item.path.c_str(), tail.c_str());
    if (out.windows) out.windows->show(item.path, frame);
    if (out.save_img) save_image(predictor.save_dir(), item.path, frame);
  }
  return c;
}

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

}  // namespace kestrel::cli
