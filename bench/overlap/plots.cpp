#include "bench/overlap/plots.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/error.h"
#include "yolo/plot_canvas.h"
#include "yolo/plot_text.h"

namespace kestrel::bench::overlap {
namespace {

using yolo::Chart;
using yolo::ChartStyle;
using yolo::LegendEntry;

constexpr int kWidth = 900, kHeight = 480;
constexpr double kFont = 0.5;
const cv::Scalar kWhite(255, 255, 255), kGrey(150, 150, 150);

ChartStyle style(bool x_ticks = true, bool y_ticks = true) {
  ChartStyle s;
  s.font = kFont;
  s.left = 70, s.right = 16, s.top = 34, s.bottom = 52;
  s.max_ticks = 6;
  s.x_ticks = x_ticks;
  s.y_ticks = y_ticks;
  return s;
}

// A vertical bar from lo to hi at x: the range over repetitions.
void range(Chart& c, double x, double lo, double hi, cv::Scalar colour) { c.line({x, x}, {lo, hi}, colour, 1); }

}  // namespace

void plot_step_vs_bandwidth(const BandwidthReport& report, double cap_mb, const std::string& png_path) {
  std::map<double, const SettingSummary*> off, on;
  for (const SettingSummary& s : report.settings)
    if (s.cap_mb == cap_mb) (s.overlap ? on : off)[s.rate_bits / 1e6] = &s;
  KESTREL_CHECK(!on.empty() && !off.empty(), "overlap bandwidth: no measurements at a bucket cap of ", cap_mb,
                " MB to plot");
  double xmax = 0, ymax = 0;
  for (const auto& [x, s] : off) {
    xmax = std::max(xmax, x);
    ymax = std::max({ymax, s->step_us.hi, s->predicted_step_us});
  }
  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  char title[160];
  std::snprintf(title, sizeof title, "2 ranks over a shaped veth, %g MB buckets: step time against bandwidth", cap_mb);
  const int chart_width = kWidth - 250;
  Chart c(canvas, {0, 0, chart_width, kHeight}, title, 0, xmax * 1.05, 0, ymax / 1e3 * 1.08, style());
  struct Series {
    const std::map<double, const SettingSummary*>* m;
    cv::Scalar colour;
  };
  for (const Series& ser : {Series{&off, yolo::tab10(3)}, Series{&on, yolo::tab10(0)}}) {
    std::vector<double> xs, measured, predicted;
    for (const auto& [x, s] : *ser.m) {
      xs.push_back(x);
      measured.push_back(s->step_us.median / 1e3);
      predicted.push_back(s->predicted_step_us / 1e3);
      range(c, x, s->step_us.lo / 1e3, s->step_us.hi / 1e3, ser.colour);
    }
    c.line(xs, measured, ser.colour, 2, true);
    c.dotted(xs, predicted, ser.colour, 2);
  }
  std::vector<double> xs, alone, backward;
  for (const auto& [x, s] : on) {
    xs.push_back(x);
    alone.push_back(s->alone_us.median / 1e3);
    backward.push_back(s->backward_us.median / 1e3);
  }
  c.line(xs, alone, kGrey, 2, true);
  c.line(xs, backward, yolo::tab10(2), 2, true);
  c.close();
  c.x_label("link rate (tc tbf), Mbit/s");
  c.y_label("ms");
  const std::string cal = "predicted (calibrated on " + report.calibrate_rate + ")";
  yolo::draw_legend(canvas,
                    {{"step, overlap off", yolo::tab10(3)},
                     {"step, overlap on", yolo::tab10(0)},
                     {"off: " + cal, yolo::tab10(3), 2, true},
                     {"on: " + cal, yolo::tab10(0), 2, true},
                     {"all-reduce alone", kGrey},
                     {"backward (overlap on)", yolo::tab10(2)}},
                    {chart_width + 6, 40}, 0.42);
  yolo::save_plot(png_path, canvas);
}

void plot_overlap_vs_bucket(const BandwidthReport& report, const std::string& png_path) {
  std::map<double, std::vector<const SettingSummary*>, std::greater<>> by_rate;
  std::vector<double> caps;
  for (const SettingSummary& s : report.settings)
    if (s.overlap) {
      by_rate[s.rate_bits].push_back(&s);
      if (std::find(caps.begin(), caps.end(), s.cap_mb) == caps.end()) caps.push_back(s.cap_mb);
    }
  KESTREL_CHECK(!caps.empty(), "overlap bandwidth: no overlapped runs to plot");
  std::sort(caps.begin(), caps.end());
  // Caps at log2 positions: 1, 2, 4, 8 MB evenly spaced.
  const double x0 = std::log2(caps.front()) - 0.3, x1 = std::log2(caps.back()) + 0.3;
  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  const int chart_width = kWidth - 200;
  Chart c(canvas, {0, 0, chart_width, kHeight}, "Overlap efficiency against bucket size (2 ranks, shaped veth)", x0,
          x1, 0, 105, style(false));
  std::vector<LegendEntry> legend;
  int i = 0;
  for (const auto& [bits, settings] : by_rate) {
    const cv::Scalar colour = yolo::tab10(i++);
    std::vector<double> xs, ys;
    for (const SettingSummary* s : settings) {
      const double x = std::log2(s->cap_mb);
      xs.push_back(x);
      ys.push_back(100 * s->efficiency.median);
      range(c, x, 100 * s->efficiency.lo, 100 * s->efficiency.hi, colour);
    }
    c.line(xs, ys, colour, 2, true);
    const SettingSummary& first = *settings.front();
    char text[96];
    std::snprintf(text, sizeof text, "%s (all-reduce %.0f ms)", first.rate.c_str(), first.alone_us.median / 1e3);
    legend.push_back({text, colour});
  }
  c.line({x0, x1}, {90, 90}, kGrey, 1);
  c.close();
  for (double cap : caps) {
    const cv::Point p = c.to_pixel(std::log2(cap), 0);
    yolo::put_text(canvas, yolo::short_number(cap), {p.x, p.y + 8}, kFont, yolo::Align::kCentre, yolo::Align::kStart);
  }
  c.x_label("bucket cap, MB (--bucket-cap-mb)");
  c.y_label("overlap efficiency, %");
  yolo::draw_legend(canvas, legend, {chart_width + 6, 40}, 0.42);
  yolo::save_plot(png_path, canvas);
}

void plot_step_timeline(const std::vector<TimelineRow>& rows, double cap_mb, int step, const std::string& title,
                        const std::string& png_path) {
  std::vector<const TimelineRow*> b;
  for (const TimelineRow& r : rows)
    if (r.cap_mb == cap_mb && r.overlap && r.step == step) b.push_back(&r);
  KESTREL_CHECK(!b.empty(), "overlap bandwidth: no overlapped step ", step, " at a cap of ", cap_mb, " MB to draw");
  // Times in ms since the step started; backward starts at pre.
  const double pre = b[0]->pre_us / 1e3, bwd = b[0]->backward_us / 1e3, fin = b[0]->finalize_us / 1e3;
  double end = pre + fin;
  for (const TimelineRow* r : b) end = std::max(end, pre + r->done_us / 1e3);
  cv::Mat canvas(300, kWidth, CV_8UC3, kWhite);
  ChartStyle st = style(true, false);
  st.left = 120;
  Chart c(canvas, {0, 0, kWidth, 300}, title, 0, end * 1.02, 0, 2, st);
  c.cell(0, 1.2, pre, 1.8, kGrey);
  c.cell(pre, 1.2, pre + bwd, 1.8, yolo::tab10(0));
  c.cell(pre + bwd, 1.2, pre + fin, 1.8, yolo::tab10(3));
  for (size_t i = 0; i < b.size(); ++i) {
    const double launch = pre + b[i]->launch_us / 1e3, done = pre + b[i]->done_us / 1e3;
    const cv::Scalar colour = i % 2 ? yolo::tab10(1) : yolo::tab10(4);
    c.cell(launch, 0.25, done, 0.75, colour);
    const double ready = pre + b[i]->ready_us / 1e3;
    c.line({ready, ready}, {0.8, 1.15}, kGrey, 1);
    char size[32];
    std::snprintf(size, sizeof size, "%.1f", static_cast<double>(b[i]->bytes) / (1024.0 * 1024.0));
    const cv::Point p = c.to_pixel((launch + done) / 2, 0.5);
    if (c.to_pixel(done, 0).x - c.to_pixel(launch, 0).x > 28)
      yolo::put_text(canvas, size, p, 0.4, yolo::Align::kCentre, yolo::Align::kCentre, kWhite);
  }
  c.close();
  for (const auto& [y, text] : std::vector<std::pair<double, std::string>>{{1.5, "compute"}, {0.5, "all-reduce"}}) {
    const cv::Point p = c.to_pixel(0, y);
    yolo::put_text(canvas, text, {p.x - 8, p.y}, kFont, yolo::Align::kEnd, yolo::Align::kCentre);
  }
  c.x_label("ms since the step began: forward (grey), backward (blue), wait for gradients (red); buckets in MB");
  yolo::save_plot(png_path, canvas);
}

}  // namespace kestrel::bench::overlap
