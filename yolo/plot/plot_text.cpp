#include "yolo/plot/plot_text.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

namespace kestrel::yolo {
namespace {

constexpr int kFont = cv::FONT_HERSHEY_SIMPLEX;

int thickness_for(double scale) { return scale >= 0.75 ? 2 : 1; }

int shift(int length, Align a) {
  return a == Align::kStart ? 0 : a == Align::kCentre ? length / 2 : length;
}

}  // namespace

cv::Size text_size(const std::string& text, double scale) {
  int base = 0;
  return cv::getTextSize(text, kFont, scale, thickness_for(scale), &base);
}

void put_text(cv::Mat& canvas, const std::string& text, cv::Point at, double scale, Align h, Align v,
              cv::Scalar colour) {
  const cv::Size size = text_size(text, scale);
  // putText's origin is the baseline's left end; the box spans size.height above it.
  const cv::Point origin(at.x - shift(size.width, h), at.y - shift(size.height, v) + size.height);
  cv::putText(canvas, text, origin, kFont, scale, colour, thickness_for(scale), cv::LINE_AA);
}

void put_text_vertical(cv::Mat& canvas, const std::string& text, cv::Point at, double scale, Align h,
                       Align v, cv::Scalar colour) {
  const cv::Size size = text_size(text, scale);
  const int pad = std::max(2, size.height / 3);  // room for descenders
  cv::Mat strip(size.height + 2 * pad, size.width + 2, CV_8UC3, cv::Scalar(255, 255, 255));
  put_text(strip, text, {1, pad}, scale, Align::kStart, Align::kStart, colour);
  cv::Mat turned;
  cv::rotate(strip, turned, cv::ROTATE_90_COUNTERCLOCKWISE);
  cv::Rect box(at.x - shift(turned.cols, h), at.y - shift(turned.rows, v), turned.cols, turned.rows);
  const cv::Rect inside = box & cv::Rect(0, 0, canvas.cols, canvas.rows);
  if (inside.empty()) return;
  // Darkest wins: the white strip leaves what is under it alone.
  cv::Mat target = canvas(inside);
  cv::min(target, turned(inside - box.tl()), target);
}

cv::Rect draw_legend(cv::Mat& canvas, const std::vector<LegendEntry>& entries, cv::Point origin,
                     double scale) {
  if (entries.empty()) return {};
  const int row = text_size("Ag", scale).height * 2, swatch = row * 2, pad = row / 3;
  int width = 0, rows = 0;
  for (const auto& e : entries) {
    if (origin.y + (rows + 1) * row + 2 * pad > canvas.rows) break;
    width = std::max(width, text_size(e.text, scale).width);
    ++rows;
  }
  const cv::Rect box(origin.x, origin.y, swatch + 3 * pad + width, rows * row + 2 * pad);
  cv::rectangle(canvas, box, cv::Scalar(255, 255, 255), cv::FILLED);
  cv::rectangle(canvas, box, cv::Scalar(200, 200, 200), 1);
  for (int i = 0; i < rows; ++i) {
    const auto& e = entries[i];
    const int y = origin.y + pad + i * row + row / 2;
    const int x0 = origin.x + pad, x1 = x0 + swatch;
    if (e.dotted) {
      for (int x = x0; x < x1; x += 2 * e.thickness + 4)
        cv::circle(canvas, {x + e.thickness, y}, std::max(1, e.thickness - 1), e.colour, cv::FILLED, cv::LINE_AA);
    } else {
      cv::line(canvas, {x0, y}, {x1, y}, e.colour, e.thickness, cv::LINE_AA);
    }
    put_text(canvas, e.text, {x1 + pad, y}, scale, Align::kStart, Align::kCentre);
  }
  return box;
}

cv::Scalar tab10(int index) {
  static const cv::Scalar cycle[10] = {{180, 119, 31}, {14, 127, 255}, {44, 160, 44},  {40, 39, 214},
                                       {189, 103, 148}, {75, 86, 140},  {194, 119, 227}, {127, 127, 127},
                                       {34, 189, 188},  {207, 190, 23}};
  return cycle[((index % 10) + 10) % 10];
}

namespace {

// A colour map given by nine RGB anchors at 0, 1/8, ..., 1, interpolated linearly; BGR at t in
// [0, 1] (clamped; NaN reads as 0).
cv::Scalar nine_anchor_map(const double (&anchors)[9][3], double t) {
  const double u = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 8;
  const int i = std::min(7, static_cast<int>(u));
  const double f = u - i;
  double rgb[3];
  for (int k = 0; k < 3; ++k) rgb[k] = anchors[i][k] * (1 - f) + anchors[i + 1][k] * f;
  return cv::Scalar(rgb[2], rgb[1], rgb[0]);
}

}  // namespace

cv::Scalar blues(double t) {
  static const double anchors[9][3] = {{247, 251, 255}, {222, 235, 247}, {198, 219, 239},
                                       {158, 202, 225}, {107, 174, 214}, {66, 146, 198},
                                       {33, 113, 181},  {8, 81, 156},    {8, 48, 107}};
  return nine_anchor_map(anchors, t);
}

cv::Scalar viridis(double t) {
  static const double anchors[9][3] = {{68, 1, 84},    {71, 45, 123},  {59, 82, 139},
                                       {44, 114, 142}, {33, 145, 140}, {40, 174, 128},
                                       {94, 201, 98},  {173, 220, 48}, {253, 231, 37}};
  return nine_anchor_map(anchors, t);
}

}  // namespace kestrel::yolo
