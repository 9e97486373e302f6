#include "yolo/cli/frame_predictor.h"

#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "yolo/data/augment.h"
#include "yolo/data/image_codec.h"
#include "yolo/plot/annotate.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

// The reference's increment_path on a file: dir/stem.jpg, else dir/stem2.jpg, stem3.jpg, ...
fs::path free_jpg(const fs::path& dir, const std::string& stem) {
  fs::path p = dir / (stem + ".jpg");
  for (int n = 2; fs::exists(p); ++n) p = dir / (stem + std::to_string(n) + ".jpg");
  return p;
}

}  // namespace

FrameInput frame_input(const cv::Mat& frame, const DetectSettings& s, Device device) {
  FrameInput in;
  in.letterboxed =
      yolo::data::letterbox(frame, s.img_h, s.img_w, s.letterbox_auto, /*scaleup=*/true, s.stride).image;
  cv::Mat rgb;
  cv::cvtColor(in.letterboxed, rgb, cv::COLOR_BGR2RGB);
  in.x = Tensor::empty({1, rgb.rows, rgb.cols, 3});
  float* px = in.x.data<float>();
  for (int y = 0; y < rgb.rows; ++y)
    for (int i = 0; i < rgb.cols * 3; ++i) px[y * rgb.cols * 3 + i] = rgb.ptr<uint8_t>(y)[i] / 255.0f;
  in.x = in.x.to(device);
  if (s.dtype != DType::F32) in.x = in.x.to(s.dtype);
  return in;
}

std::string class_name(const std::vector<std::string>& names, int c) {
  return c >= 0 && c < static_cast<int>(names.size()) ? names[c] : std::to_string(c);
}

void save_box_crop(const std::string& save_dir, const cv::Mat& image, const float box[4], const std::string& name,
                   const std::string& stem) {
  const cv::Rect r = yolo::crop_rect(box, image.rows, image.cols);
  if (r.empty()) return;
  const fs::path dir = fs::path(save_dir) / "crops" / name;
  fs::create_directories(dir);
  // The reference saves crops through PIL at quality 95 without chroma subsampling.
  yolo::data::write_jpeg(free_jpg(dir, stem).string(), image(r).clone(), 95, /*full_chroma=*/true);
}

std::string frame_line(int h, int w, const std::map<int, int>& counts, const std::vector<std::string>& names,
                       double inference_ms) {
  std::string line = str(h, "x", w, " ");
  for (const auto& [c, n] : counts) line += str(n, " ", class_name(names, c), n > 1 ? "s" : "", ", ");
  if (counts.empty()) line += "(no detections), ";
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1fms", inference_ms);
  return line + ms;
}

}  // namespace kestrel::cli
