#include "yolo/plot/annotate.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kestrel::yolo {

int annotator_line_width(int line_thickness, int height, int width) {
  if (line_thickness > 0) return line_thickness;
  // Python's round(): halves to even, as std::nearbyint in the default rounding mode.
  return std::max(static_cast<int>(std::nearbyint((height + width + 3) / 2.0 * 0.003)), 2);
}

std::string detection_label(const std::string& name, float conf, bool hide_labels, bool hide_conf) {
  if (hide_labels) return "";
  if (hide_conf) return name;
  char buf[32];
  std::snprintf(buf, sizeof buf, " %.2f", static_cast<double>(conf));
  return name + buf;
}

void draw_box_label(cv::Mat& image, const float box[4], const std::string& label, cv::Scalar colour,
                    int line_width) {
  const cv::Point p1(static_cast<int>(box[0]), static_cast<int>(box[1]));
  const cv::Point p2(static_cast<int>(box[2]), static_cast<int>(box[3]));
  cv::rectangle(image, p1, p2, colour, line_width, cv::LINE_AA);
  if (label.empty()) return;
  const int font_thickness = std::max(line_width - 1, 1);
  const double scale = line_width / 3.0;
  int baseline = 0;
  const cv::Size text = cv::getTextSize(label, cv::FONT_HERSHEY_SIMPLEX, scale, font_thickness, &baseline);
  const bool outside = p1.y - text.height >= 3;
  const cv::Point corner(p1.x + text.width, outside ? p1.y - text.height - 3 : p1.y + text.height + 3);
  cv::rectangle(image, p1, corner, colour, cv::FILLED, cv::LINE_AA);
  cv::putText(image, label, {p1.x, outside ? p1.y - 2 : p1.y + text.height + 2},
              cv::FONT_HERSHEY_SIMPLEX, scale, {255, 255, 255}, font_thickness, cv::LINE_AA);
}

cv::Rect crop_rect(const float box[4], int height, int width) {
  const float cx = (box[0] + box[2]) / 2, cy = (box[1] + box[3]) / 2;
  const float w = (box[2] - box[0]) * 1.02f + 10, h = (box[3] - box[1]) * 1.02f + 10;
  // torch's .long() truncates toward zero; clip_boxes then clamps to [0, width] and [0, height].
  auto clamp = [](float v, int hi) { return std::clamp(static_cast<int>(std::trunc(v)), 0, hi); };
  const int x1 = clamp(cx - w / 2, width), y1 = clamp(cy - h / 2, height);
  const int x2 = clamp(cx + w / 2, width), y2 = clamp(cy + h / 2, height);
  return {x1, y1, std::max(0, x2 - x1), std::max(0, y2 - y1)};
}

std::string yolo_txt_line(int cls, const float box[4], float conf, int height, int width,
                          bool save_conf) {
  const float w = static_cast<float>(width), h = static_cast<float>(height);
  const float x = (box[0] + box[2]) / 2 / w, y = (box[1] + box[3]) / 2 / h;
  const float bw = (box[2] - box[0]) / w, bh = (box[3] - box[1]) / h;
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "%g %g %g %g %g", static_cast<double>(cls), static_cast<double>(x),
                        static_cast<double>(y), static_cast<double>(bw), static_cast<double>(bh));
  if (save_conf) std::snprintf(buf + n, sizeof buf - n, " %g", static_cast<double>(conf));
  return buf;
}

}  // namespace kestrel::yolo
