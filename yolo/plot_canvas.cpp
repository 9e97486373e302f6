#include "yolo/plot_canvas.h"

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstdio>

namespace kestrel::yolo {
namespace {

const cv::Scalar kInk(40, 40, 40), kGrid(225, 225, 225);
constexpr int kFont = cv::FONT_HERSHEY_SIMPLEX;

}  // namespace

std::string short_number(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (a != 0 && (a >= 1e4 || a < 1e-3))
    std::snprintf(buf, sizeof buf, "%.1e", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

Chart::Chart(cv::Mat& canvas, cv::Rect frame, const std::string& title, double x0, double x1,
             double y0, double y1)
    : canvas_(canvas), x0_(x0), x1_(x1 > x0 ? x1 : x0 + 1), y0_(y0), y1_(y1 > y0 ? y1 : y0 + 1) {
  const int left = 52, right = 12, top = 26, bottom = 34;
  area_ = cv::Rect(frame.x + left, frame.y + top, frame.width - left - right,
                   frame.height - top - bottom);
  cv::putText(canvas_, title, {frame.x + left, frame.y + 18}, kFont, 0.5, kInk, 1, cv::LINE_AA);
  for (int i = 0; i <= 4; ++i) {
    const int y = area_.y + area_.height * i / 4;
    const int x = area_.x + area_.width * i / 4;
    cv::line(canvas_, {area_.x, y}, {area_.x + area_.width, y}, kGrid, 1);
    cv::line(canvas_, {x, area_.y}, {x, area_.y + area_.height}, kGrid, 1);
    const double yv = y1_ - (y1_ - y0_) * i / 4, xv = x0_ + (x1_ - x0_) * i / 4;
    cv::putText(canvas_, short_number(yv), {frame.x + 2, y + 4}, kFont, 0.35, kInk, 1, cv::LINE_AA);
    cv::putText(canvas_, short_number(xv), {x - 10, area_.y + area_.height + 14}, kFont, 0.35, kInk,
                1, cv::LINE_AA);
  }
  cv::rectangle(canvas_, area_, kInk, 1);
}

cv::Point Chart::to_pixel(double x, double y) const {
  const double fx = (x - x0_) / (x1_ - x0_), fy = (y - y0_) / (y1_ - y0_);
  return {area_.x + static_cast<int>(std::lround(fx * area_.width)),
          area_.y + area_.height - static_cast<int>(std::lround(fy * area_.height))};
}

void Chart::line(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour,
                 int thickness, bool markers) {
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) {
    if (!std::isfinite(ys[i])) continue;
    if (i > 0 && std::isfinite(ys[i - 1]))
      cv::line(canvas_, to_pixel(xs[i - 1], ys[i - 1]), to_pixel(xs[i], ys[i]), colour, thickness,
               cv::LINE_AA);
    if (markers) cv::circle(canvas_, to_pixel(xs[i], ys[i]), 3, colour, cv::FILLED, cv::LINE_AA);
  }
}

void Chart::dashed(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour) {
  for (size_t i = 1; i < xs.size() && i < ys.size(); i += 2)
    if (std::isfinite(ys[i]) && std::isfinite(ys[i - 1]))
      cv::line(canvas_, to_pixel(xs[i - 1], ys[i - 1]), to_pixel(xs[i], ys[i]), colour, 1, cv::LINE_AA);
}

void Chart::bar(double x, double width, double height, cv::Scalar colour) {
  cv::rectangle(canvas_, cv::Rect(to_pixel(x, height), to_pixel(x + width, y0_)), colour, cv::FILLED);
}

void Chart::point(double x, double y, cv::Scalar colour, int radius) {
  cv::circle(canvas_, to_pixel(x, y), radius, colour, cv::FILLED);
}

void Chart::x_label(const std::string& text) {
  cv::putText(canvas_, text, {area_.x + area_.width / 2 - 20, area_.y + area_.height + 30}, kFont,
              0.4, kInk, 1, cv::LINE_AA);
}

void Chart::y_label(const std::string& text) {
  cv::putText(canvas_, text, {area_.x + 4, area_.y + 14}, kFont, 0.4, kInk, 1, cv::LINE_AA);
}

cv::Scalar class_colour(int index) {
  // 20 distinct hues (BGR), cycled.
  static const cv::Scalar palette[20] = {
      {56, 56, 255},  {151, 157, 255}, {31, 112, 255}, {29, 178, 255}, {49, 210, 207},
      {10, 249, 72},  {23, 204, 146},  {134, 219, 61}, {52, 147, 26},  {187, 212, 0},
      {168, 153, 44}, {255, 194, 0},   {147, 69, 52},  {255, 115, 100}, {236, 24, 0},
      {255, 56, 132}, {133, 0, 82},    {255, 56, 203}, {200, 149, 255}, {199, 55, 255}};
  return palette[((index % 20) + 20) % 20];
}

void draw_label(cv::Mat& image, const std::string& text, cv::Point origin, cv::Scalar background,
                double scale) {
  int base = 0;
  const cv::Size size = cv::getTextSize(text, kFont, scale, 1, &base);
  const cv::Rect box(origin.x, std::max(0, origin.y - size.height - 4), size.width + 4, size.height + 4);
  cv::rectangle(image, box, background, cv::FILLED);
  cv::putText(image, text, {box.x + 2, box.y + size.height + 1}, kFont, scale, {255, 255, 255}, 1,
              cv::LINE_AA);
}

}  // namespace kestrel::yolo
