#include "yolo/cli/segmenter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/autograd.h"
#include "yolo/eval/box_ops.h"
#include "yolo/eval/mask_ops.h"
#include "yolo/plot/annotate.h"
#include "yolo/plot/annotate_masks.h"
#include "yolo/plot/plot_canvas.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A BGR uint8 image as planes (3, h, w), and back: the layout of the mask functions, so that the
// blended input goes through scale_image's cut and resize (scale_masks_to_original) as masks do.
Tensor to_planes(const cv::Mat& image) {
  Tensor out = Tensor::empty({3, image.rows, image.cols}, DType::U8);
  uint8_t* p = out.data<uint8_t>();
  const int64_t area = static_cast<int64_t>(image.rows) * image.cols;
  for (int y = 0; y < image.rows; ++y)
    for (int x = 0; x < image.cols; ++x)
      for (int c = 0; c < 3; ++c) p[c * area + static_cast<int64_t>(y) * image.cols + x] = image.ptr<uint8_t>(y)[x * 3 + c];
  return out;
}

void from_planes(const Tensor& planes, cv::Mat& image) {
  const uint8_t* p = planes.data<uint8_t>();
  const int64_t area = static_cast<int64_t>(image.rows) * image.cols;
  for (int y = 0; y < image.rows; ++y)
    for (int x = 0; x < image.cols; ++x)
      for (int c = 0; c < 3; ++c) image.ptr<uint8_t>(y)[x * 3 + c] = p[c * area + static_cast<int64_t>(y) * image.cols + x];
}

}  // namespace

std::string polygon_txt_line(int cls, const std::vector<std::array<float, 2>>& polygon, float conf, int in_h, int in_w,
                             int height, int width, bool save_conf) {
  // scale_segments: the gain and padding in double, as Python computes them; the float32 points
  // take them as float32 (numpy's float32 arithmetic with a Python number).
  const double gain = std::min(static_cast<double>(in_h) / height, static_cast<double>(in_w) / width);
  const float pad_x = static_cast<float>((in_w - width * gain) / 2), pad_y = static_cast<float>((in_h - height * gain) / 2);
  const float g = static_cast<float>(gain), w = static_cast<float>(width), h = static_cast<float>(height);
  std::string line = str(cls);
  char buf[32];
  for (const auto& p : polygon) {
    const float x = std::clamp((p[0] - pad_x) / g, 0.0f, w) / w;
    const float y = std::clamp((p[1] - pad_y) / g, 0.0f, h) / h;
    std::snprintf(buf, sizeof buf, " %g %g", static_cast<double>(x), static_cast<double>(y));
    line += buf;
  }
  if (save_conf) {
    std::snprintf(buf, sizeof buf, " %g", static_cast<double>(conf));
    line += buf;
  }
  return line;
}

Segmenter::Segmenter(std::shared_ptr<yolo::SegmentationModel> model, std::vector<std::string> names,
                     DetectSettings settings, bool retina_masks, Device device, std::string save_dir)
    : Segmenter([model](const Tensor& x) { return model->predict(x); }, model->segment().nm, std::move(names),
                std::move(settings), retina_masks, device, std::move(save_dir)) {}

Segmenter::Segmenter(Predictor predict, int64_t nm, std::vector<std::string> names, DetectSettings settings,
                     bool retina_masks, Device device, std::string save_dir)
    : predict_(std::move(predict)),
      names_(std::move(names)),
      s_(std::move(settings)),
      retina_masks_(retina_masks),
      device_(device),
      save_dir_(std::move(save_dir)) {
  s_.nms.nm = nm;
}

void Segmenter::draw_masks(cv::Mat& frame, const cv::Mat& letterboxed, const Tensor& masks,
                           const std::vector<int>& classes) const {
  std::vector<cv::Scalar> colours;
  for (int c : classes) colours.push_back(yolo::class_colour(c));
  const yolo::ImageSize original{frame.rows, frame.cols};
  if (retina_masks_) {  // the masks resized to the frame, blended into it
    yolo::blend_masks_on_frame(frame, yolo::scale_masks_to_original(masks, original), colours);
    return;
  }
  // Blended into the input, which then replaces the frame: cut out of its padding and resized.
  const cv::Mat blended = yolo::blend_masks_on_input(letterboxed, masks, colours);
  from_planes(yolo::scale_masks_to_original(to_planes(blended), original), frame);
}

std::string Segmenter::process(cv::Mat& frame, const std::string& txt_stem, const std::string& crop_stem) {
  autograd::NoGradGuard no_grad;
  auto t0 = Clock::now();
  const FrameInput in = frame_input(frame, s_, device_);
  const int in_h = in.letterboxed.rows, in_w = in.letterboxed.cols;
  times_.pre += ms_since(t0);

  t0 = Clock::now();
  const yolo::SegmentationModel::Prediction pred = predict_(in.x);
  current_stream(device_).synchronize();
  const double inference_ms = ms_since(t0);
  times_.inference += inference_ms;

  t0 = Clock::now();
  Tensor det = yolo::non_max_suppression(pred.boxes, s_.nms)[0];
  times_.nms += ms_since(t0);
  ++times_.frames;
  const int64_t k = det.size(0), nm = s_.nms.nm, cols = 6 + nm;
  std::map<int, int> counts;
  if (k == 0) return frame_line(in_h, in_w, counts, names_, inference_ms);

  // The masks from the boxes in the input's pixels, before they are scaled to the frame.
  const Tensor protos = pred.protos.to(Device::cpu()).to(DType::F32).contiguous();
  const Tensor masks = yolo::process_mask(protos.reshape({protos.size(1), protos.size(2), protos.size(3)}),
                                          det.slice(1, 6, cols).contiguous(), det.slice(1, 0, 4).contiguous(),
                                          {in_h, in_w}, /*upsample=*/true);
  std::vector<yolo::MaskPolygon> segments;
  if (s_.save_txt) segments = yolo::masks_to_segments(masks, yolo::SegmentStrategy::kLargest);
  // As segment/predict.py: scale_boxes from the shapes alone, then round.
  yolo::scale_boxes(det, {in_h, in_w}, {frame.rows, frame.cols});
  std::vector<float> d = det.to_vector<float>();
  std::vector<int> classes;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t c = 0; c < 4; ++c) d[i * cols + c] = std::nearbyint(d[i * cols + c]);
    classes.push_back(static_cast<int>(d[i * cols + 5]));
    ++counts[classes.back()];
  }
  const cv::Mat unannotated = s_.save_crop ? frame.clone() : cv::Mat();
  if (s_.draw) draw_masks(frame, in.letterboxed, masks, classes);
  const int line_width = yolo::annotator_line_width(s_.line_thickness, frame.rows, frame.cols);
  std::ofstream txt;
  // The reference writes, draws and crops from the lowest confidence up.
  for (int64_t i = k; i-- > 0;) {
    const float* row = &d[i * cols];
    const int cls = classes[i];
    if (s_.save_txt) {
      if (!txt.is_open()) txt.open(fs::path(save_dir_) / "labels" / (txt_stem + ".txt"), std::ios::app);
      txt << polygon_txt_line(cls, segments[i], row[4], in_h, in_w, frame.rows, frame.cols, s_.save_conf) << "\n";
    }
    if (s_.draw || s_.save_crop)
      yolo::draw_box_label(frame, row, yolo::detection_label(class_name(names_, cls), row[4], s_.hide_labels, s_.hide_conf),
                           yolo::class_colour(cls), line_width);
    if (s_.save_crop) save_box_crop(save_dir_, unannotated, row, class_name(names_, cls), crop_stem);
  }
  return frame_line(in_h, in_w, counts, names_, inference_ms);
}

}  // namespace kestrel::cli
