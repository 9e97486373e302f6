#include "yolo/plot/plot_canvas.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "yolo/data/image_codec.h"
#include "yolo/plot/plot_text.h"

namespace kestrel::yolo {
namespace {

const cv::Scalar kGrid(225, 225, 225);
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

std::vector<double> nice_ticks(double lo, double hi, int max_ticks, bool integer) {
  if (!(std::isfinite(lo) && std::isfinite(hi))) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-300) return {lo};
  max_ticks = std::max(2, max_ticks);
  const double raw = (hi - lo) / (max_ticks - 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double multiple = 10;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    const double s = m * power;
    // A step is good when the ticks it places inside [lo, hi] are few enough.
    if (std::floor(hi / s + 1e-9) - std::ceil(lo / s - 1e-9) + 1 <= max_ticks) {
      multiple = m;
      break;
    }
  }
  // k * multiple / 10^-e rather than k * multiple * 10^e: 0.6, not 0.6000000000000001.
  const double inverse = power < 1 ? std::round(1 / power) : 0;
  auto at = [&](double k) { return inverse > 0 ? k * multiple / inverse : k * multiple * power; };
  double step = at(1);
  std::vector<double> ticks;
  if (integer && step < 1) {
    for (double k = std::ceil(lo); k <= hi; k += 1) ticks.push_back(k);
    return ticks;
  }
  for (double k = std::ceil(lo / step - 1e-9); at(k) <= hi + step * 1e-9; k += 1)
    ticks.push_back(k == 0 ? 0.0 : at(k));
  return ticks;
}

std::string tick_label(double value, double step) {
  // One format per axis (the step decides), so neighbouring ticks read alike: fixed decimals
  // down to steps of 1e-6, "%.3g" below that and for very large values.
  int decimals = 0;
  for (double s = std::abs(step); decimals < 7 && std::abs(s - std::round(s)) > 1e-6 * s; s *= 10)
    ++decimals;
  char buf[32];
  if (decimals > 6 || std::abs(value) >= 1e5)
    std::snprintf(buf, sizeof buf, "%.3g", value);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

Chart::Chart(cv::Mat& canvas, cv::Rect frame, const std::string& title, double x0, double x1,
             double y0, double y1, const ChartStyle& style)
    : canvas_(canvas), frame_(frame), style_(style), x0_(x0), x1_(x1 > x0 ? x1 : x0 + 1), y0_(y0),
      y1_(y1 > y0 ? y1 : y0 + 1) {
  area_ = cv::Rect(frame.x + style.left, frame.y + style.top, frame.width - style.left - style.right,
                   frame.height - style.top - style.bottom);
  const double font = style.font;
  put_text(canvas_, title, {area_.x + area_.width / 2, frame.y + 12},
           font * 1.25, Align::kCentre, Align::kStart);
  const int gap = std::max(3, text_size("0", font).height / 2);
  const std::vector<double> xt = style.x_ticks ? nice_ticks(x0_, x1_, style.max_ticks, style.integer_x) : std::vector<double>{};
  const std::vector<double> yt = style.y_ticks ? nice_ticks(y0_, y1_, style.max_ticks) : std::vector<double>{};
  for (double v : yt) {
    const int y = to_pixel(x0_, v).y;
    cv::line(canvas_, {area_.x, y}, {area_.x + area_.width, y}, kGrid, 1);
    cv::line(canvas_, {area_.x - gap, y}, {area_.x, y}, kPlotInk, 1);
    put_text(canvas_, tick_label(v, yt.size() > 1 ? yt[1] - yt[0] : v), {area_.x - 2 * gap, y}, font,
             Align::kEnd, Align::kCentre);
  }
  for (double v : xt) {
    const int x = to_pixel(v, y0_).x;
    cv::line(canvas_, {x, area_.y}, {x, area_.y + area_.height}, kGrid, 1);
    cv::line(canvas_, {x, area_.y + area_.height}, {x, area_.y + area_.height + gap}, kPlotInk, 1);
    put_text(canvas_, tick_label(v, xt.size() > 1 ? xt[1] - xt[0] : v),
             {x, area_.y + area_.height + 2 * gap}, font, Align::kCentre, Align::kStart);
  }
  cv::rectangle(canvas_, area_, kPlotInk, 1);
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
    if (markers) cv::circle(canvas_, to_pixel(xs[i], ys[i]), thickness + 2, colour, cv::FILLED, cv::LINE_AA);
  }
}

void Chart::dotted(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour,
                   int thickness) {
  // Dots every few pixels along the polyline, as matplotlib's ':' style.
  const double spacing = 2.0 * thickness + 4;
  double carry = 0;
  for (size_t i = 1; i < xs.size() && i < ys.size(); ++i) {
    if (!std::isfinite(ys[i]) || !std::isfinite(ys[i - 1])) continue;
    const cv::Point a = to_pixel(xs[i - 1], ys[i - 1]), b = to_pixel(xs[i], ys[i]);
    const double length = std::hypot(b.x - a.x, b.y - a.y);
    double t = carry;
    for (; t <= length; t += spacing) {
      const double f = length > 0 ? t / length : 0;
      cv::circle(canvas_, {static_cast<int>(std::lround(a.x + f * (b.x - a.x))),
                           static_cast<int>(std::lround(a.y + f * (b.y - a.y)))},
                 std::max(1, thickness - 1), colour, cv::FILLED, cv::LINE_AA);
    }
    carry = t - length;
  }
}

void Chart::bar(double x, double width, double height, cv::Scalar colour) {
  cv::rectangle(canvas_, cv::Rect(to_pixel(x, height), to_pixel(x + width, y0_)), colour, cv::FILLED);
}

void Chart::point(double x, double y, cv::Scalar colour, int radius) {
  cv::circle(canvas_, to_pixel(x, y), radius, colour, cv::FILLED);
}

void Chart::cell(double x0, double y0, double x1, double y1, cv::Scalar colour) {
  const cv::Rect r = cv::Rect(to_pixel(x0, y1), to_pixel(x1, y0)) & area_;
  if (!r.empty()) cv::rectangle(canvas_, r, colour, cv::FILLED);
}

void Chart::x_label(const std::string& text) {
  put_text(canvas_, text, {area_.x + area_.width / 2, frame_.y + frame_.height - 4}, style_.font * 1.25,
           Align::kCentre, Align::kEnd);
}

void Chart::y_label(const std::string& text) {
  put_text_vertical(canvas_, text, {frame_.x + 2, area_.y + area_.height / 2}, style_.font * 1.25,
                    Align::kStart, Align::kCentre);
}

void Chart::close() { cv::rectangle(canvas_, area_, kPlotInk, 1); }

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
  cv::putText(image, text, {box.x + 2, box.y + size.height + 1}, kFont, scale, {255, 255, 255},
              std::max(1, static_cast<int>(std::lround(scale))), cv::LINE_AA);
}

void save_plot(const std::string& path, const cv::Mat& image) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".png")
    data::write_png(path, image);
  else
    data::write_jpeg(path, image, 92);
}

}  // namespace kestrel::yolo
