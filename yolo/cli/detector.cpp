#include "yolo/cli/detector.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/autograd.h"
#include "yolo/common/run_dir.h"
#include "yolo/eval/box_ops.h"
#include "yolo/plot/annotate.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_features.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

Detector::Detector(InferenceModel model, DetectSettings settings, Device device, std::string save_dir)
    : model_(std::move(model)), s_(std::move(settings)), device_(device), save_dir_(std::move(save_dir)) {}

Tensor Detector::predict(const Tensor& x, const std::string& stem) {
  if (!s_.visualize || !model_.model || model_.augment) return model_.predict(x);
  const std::string dir = yolo::increment_path((fs::path(save_dir_) / stem).string());
  fs::create_directories(dir);
  return model_.model
      ->predict(x, [&](int stage, const layers::Module& module, const Tensor& out) {
        yolo::save_feature_maps(out, module.type_name(), stage, dir);
      })
      .boxes;
}

std::string Detector::process(cv::Mat& frame, const std::string& txt_stem, const std::string& crop_stem) {
  autograd::NoGradGuard no_grad;
  auto t0 = Clock::now();
  const FrameInput in = frame_input(frame, s_, device_);
  const int in_h = in.letterboxed.rows, in_w = in.letterboxed.cols;
  times_.pre += ms_since(t0);

  t0 = Clock::now();
  const Tensor boxes = predict(in.x, crop_stem);
  current_stream(device_).synchronize();
  const double inference_ms = ms_since(t0);
  times_.inference += inference_ms;

  t0 = Clock::now();
  Tensor det = yolo::non_max_suppression(boxes, s_.nms)[0];
  times_.nms += ms_since(t0);
  ++times_.frames;
  // As detect.py: scale_boxes from the shapes alone, then round.
  yolo::scale_boxes(det, {in_h, in_w}, {frame.rows, frame.cols});
  std::vector<float> d = det.to_vector<float>();
  for (size_t i = 0; i + 6 <= d.size(); i += 6)
    for (size_t k = 0; k < 4; ++k) d[i + k] = std::nearbyint(d[i + k]);

  std::map<int, int> counts;
  for (size_t i = 0; i + 6 <= d.size(); i += 6) ++counts[static_cast<int>(d[i + 5])];
  const cv::Mat unannotated = s_.save_crop ? frame.clone() : cv::Mat();
  const int line_width = yolo::annotator_line_width(s_.line_thickness, frame.rows, frame.cols);
  std::ofstream txt;
  // The reference writes, draws and crops from the lowest confidence up.
  for (size_t i = d.size() / 6; i-- > 0;) {
    const float* row = &d[i * 6];
    const int cls = static_cast<int>(row[5]);
    if (s_.save_txt) {
      if (!txt.is_open()) txt.open(fs::path(save_dir_) / "labels" / (txt_stem + ".txt"), std::ios::app);
      txt << yolo::yolo_txt_line(cls, row, row[4], frame.rows, frame.cols, s_.save_conf) << "\n";
    }
    if (s_.draw || s_.save_crop)
      yolo::draw_box_label(frame, row, yolo::detection_label(class_name(model_.names, cls), row[4], s_.hide_labels, s_.hide_conf),
                           yolo::class_colour(cls), line_width);
    if (s_.save_crop) save_box_crop(save_dir_, unannotated, row, class_name(model_.names, cls), crop_stem);
  }

  return frame_line(in_h, in_w, counts, model_.names, inference_ms);
}

}  // namespace kestrel::cli
