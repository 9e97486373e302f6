#include "bench/overlap/plots.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/error.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"

namespace kestrel::bench::overlap {
namespace {

using yolo::Chart;
using yolo::ChartStyle;
using yolo::LegendEntry;

constexpr int kWidth = 960, kHeight = 480, kLegend = 285;
constexpr double kFont = 0.5, kLegendFont = 0.42;
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

// Settings' step times by x (ms): measured medians as a line with markers and their ranges, the
// simulator's prediction dotted.
void step_series(Chart& c, const std::map<double, const SettingSummary*>& by_x, cv::Scalar colour) {
  std::vector<double> xs, measured, predicted;
  for (const auto& [x, s] : by_x) {
    xs.push_back(x);
    measured.push_back(s->step_us.median / 1e3);
    predicted.push_back(s->predicted_step_us / 1e3);
    range(c, x, s->step_us.lo / 1e3, s->step_us.hi / 1e3, colour);
  }
  c.line(xs, measured, colour, 2, true);
  c.dotted(xs, predicted, colour, 2);
}

// The largest x, and the largest step time measured or predicted (us), of settings by x.
void extend_step_bounds(const std::map<double, const SettingSummary*>& by_x, double& xmax, double& ymax) {
  for (const auto& [x, s] : by_x) {
    xmax = std::max(xmax, x);
    ymax = std::max({ymax, s->step_us.hi, s->predicted_step_us});
  }
}

// A step-time chart left of the legend: x from 0 to xmax, y in ms up to ymax (us).
Chart step_chart(cv::Mat& canvas, const char* what, double cap_mb, double xmax, double ymax_us) {
  char title[160];
  std::snprintf(title, sizeof title, "%s, %g MB buckets", what, cap_mb);
  return Chart(canvas, {0, 0, kWidth - kLegend, kHeight}, title, 0, xmax * 1.05, 0, ymax_us / 1e3 * 1.08, style());
}

// The width draw_legend gives these entries (at the legends' scale), drawn on a scratch canvas.
int legend_width(const std::vector<LegendEntry>& legend) {
  cv::Mat scratch(kHeight, 2 * kWidth, CV_8UC3, kWhite);
  return yolo::draw_legend(scratch, legend, {0, 0}, kLegendFont).width;
}

bool has_delays(const BandwidthReport& report) {
  return std::any_of(report.settings.begin(), report.settings.end(),
                     [](const SettingSummary& s) { return s.delay_us > 0; });
}

}  // namespace

void plot_step_vs_bandwidth(const BandwidthReport& report, double cap_mb, const std::string& png_path) {
  // Without added delay only: a rate's settings with delays would take the same x
  // (plot_step_vs_delay draws them).
  std::map<double, const SettingSummary*> off, on;
  for (const SettingSummary& s : report.settings)
    if (s.cap_mb == cap_mb && s.delay_us == 0) (s.overlap ? on : off)[s.rate_bits / 1e6] = &s;
  KESTREL_CHECK(!on.empty() && !off.empty(), "overlap bandwidth: no measurements without added delay at a ",
                "bucket cap of ", cap_mb, " MB to plot");
  double xmax = 0, ymax = 0;
  extend_step_bounds(off, xmax, ymax);
  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  const int chart_width = kWidth - kLegend;
  Chart c = step_chart(canvas, "Step time against link rate", cap_mb, xmax, ymax);
  step_series(c, off, yolo::tab10(3));
  step_series(c, on, yolo::tab10(0));
  std::vector<double> xs, alone, backward;
  for (const auto& [x, s] : on) {
    xs.push_back(x);
    alone.push_back(s->alone_us.median / 1e3);
    backward.push_back(s->backward_us.median / 1e3);
  }
  c.line(xs, alone, kGrey, 2, true);
  c.line(xs, backward, yolo::tab10(2), 2, true);
  c.close();
  c.x_label(has_delays(report) ? "link rate, Mbit/s (no added delay)" : "link rate (tc tbf), Mbit/s");
  c.y_label("ms");
  yolo::draw_legend(canvas,
                    {{"step, overlap off", yolo::tab10(3)},
                     {"step, overlap on", yolo::tab10(0)},
                     {"off, simulated", yolo::tab10(3), 2, true},
                     {"on, simulated", yolo::tab10(0), 2, true},
                     {"all-reduce alone", kGrey},
                     {"backward (overlap on)", yolo::tab10(2)}},
                    {chart_width + 6, 40}, kLegendFont);
  yolo::save_plot(png_path, canvas);
}

void plot_overlap_vs_bucket(const BandwidthReport& report, const std::string& png_path) {
  std::map<LinkSetting, std::vector<const SettingSummary*>, FastestFirst> by_setting;
  std::vector<double> caps;
  for (const SettingSummary& s : report.settings)
    if (s.overlap) {
      by_setting[s.link()].push_back(&s);
      if (std::find(caps.begin(), caps.end(), s.cap_mb) == caps.end()) caps.push_back(s.cap_mb);
    }
  KESTREL_CHECK(!caps.empty(), "overlap bandwidth: no overlapped runs to plot");
  std::sort(caps.begin(), caps.end());
  // Caps at log2 positions: 1, 2, 4, 8 MB evenly spaced.
  const double x0 = std::log2(caps.front()) - 0.3, x1 = std::log2(caps.back()) + 0.3;
  std::vector<LegendEntry> legend;
  for (const auto& [link, settings] : by_setting) {
    const SettingSummary& first = *settings.front();
    char text[96];
    std::snprintf(text, sizeof text, "%s, all-reduce %.0f ms", first.rate.c_str(), first.alone_us.median / 1e3);
    legend.push_back({text, yolo::tab10(static_cast<int>(legend.size()))});
  }
  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  // Names with a delay ("500mbit+1ms") can need a wider legend than the other plots'.
  const int chart_width = kWidth - std::max(kLegend, legend_width(legend) + 12);
  Chart c(canvas, {0, 0, chart_width, kHeight}, "Overlap efficiency against bucket cap", x0, x1, 0, 105,
          style(false));
  int i = 0;
  for (const auto& [link, settings] : by_setting) {
    const cv::Scalar colour = legend[i++].colour;
    // Solid, with the range over repetitions: from the later backward's end (both ranks'
    // timelines); dotted: rank 0's own view, which adds waiting for a slower peer.
    std::vector<double> xs, ys, own;
    for (const SettingSummary* s : settings) {
      const double x = std::log2(s->cap_mb);
      const Spread& e = s->both_ranks ? s->efficiency_after_last : s->efficiency;
      xs.push_back(x);
      ys.push_back(100 * e.median);
      own.push_back(100 * s->efficiency.median);
      range(c, x, 100 * e.lo, 100 * e.hi, colour);
    }
    c.line(xs, ys, colour, 2, true);
    if (settings.front()->both_ranks) c.dotted(xs, own, colour, 1);
  }
  if (by_setting.begin()->second.front()->both_ranks) legend.push_back({"dotted: rank 0's view", kGrey, 1, true});
  c.line({x0, x1}, {90, 90}, kGrey, 1);
  c.close();
  for (double cap : caps) {
    const cv::Point p = c.to_pixel(std::log2(cap), 0);
    yolo::put_text(canvas, yolo::short_number(cap), {p.x, p.y + 8}, kFont, yolo::Align::kCentre, yolo::Align::kStart);
  }
  c.x_label("bucket cap, MB (--bucket-cap-mb)");
  c.y_label("overlap efficiency, %");
  yolo::draw_legend(canvas, legend, {chart_width + 6, 40}, kLegendFont);
  yolo::save_plot(png_path, canvas);
}

bool plot_step_vs_delay(const BandwidthReport& report, double cap_mb, const std::string& png_path) {
  // Per rate, overlap off and on, the settings by delay in ms.
  struct Rate {
    std::map<double, const SettingSummary*> off, on;
  };
  std::map<double, Rate, std::greater<>> rates;
  for (const SettingSummary& s : report.settings)
    if (s.cap_mb == cap_mb) {
      Rate& r = rates[s.rate_bits];
      (s.overlap ? r.on : r.off)[s.delay_us / 1e3] = &s;
    }
  // A rate needs its link without delay to compare with, and another delay.
  std::erase_if(rates, [](const auto& rate) {
    const Rate& r = rate.second;
    return r.off.size() < 2 || r.on.size() < 2 || !r.off.count(0) || !r.on.count(0);
  });
  if (rates.empty()) return false;
  double xmax = 0, ymax = 0;
  for (const auto& [bits, r] : rates)
    for (const auto* by_delay : {&r.off, &r.on}) extend_step_bounds(*by_delay, xmax, ymax);
  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  const int chart_width = kWidth - kLegend;
  Chart c = step_chart(canvas, "Step time against one-way delay", cap_mb, xmax, ymax);
  // Overlap off and on in a pair of colours per rate: the first rate in the rate plot's red and
  // blue; tab10's grey (7) stays for the legend's note.
  static constexpr int kPairs[][2] = {{3, 0}, {1, 9}, {5, 4}, {6, 2}};
  std::vector<LegendEntry> legend;
  int i = 0;
  for (const auto& [bits, r] : rates) {
    const int* pair = kPairs[i++ % 4];
    const std::string& name = r.on.at(0)->rate;
    const std::string rate = name.substr(0, name.find('+'));  // "1gbit" of "1gbit+0ms"
    step_series(c, r.off, yolo::tab10(pair[0]));
    step_series(c, r.on, yolo::tab10(pair[1]));
    legend.push_back({rate + ", overlap off", yolo::tab10(pair[0])});
    legend.push_back({rate + ", overlap on", yolo::tab10(pair[1])});
  }
  legend.push_back({"dotted: simulated", kGrey, 2, true});
  c.close();
  c.x_label("one-way delay (each direction), ms");
  c.y_label("step, ms");
  yolo::draw_legend(canvas, legend, {chart_width + 6, 40}, kLegendFont);
  yolo::save_plot(png_path, canvas);
  return true;
}

void plot_step_timeline(const std::vector<TimelineRow>& rows, const std::vector<TimelineRow>& peer_rows,
                        double cap_mb, int step, const std::string& title, const std::string& png_path) {
  auto step_rows = [&](const std::vector<TimelineRow>& all) {
    std::vector<const TimelineRow*> out;
    for (const TimelineRow& r : all)
      if (r.cap_mb == cap_mb && r.overlap && r.step == step) out.push_back(&r);
    return out;
  };
  const std::vector<const TimelineRow*> b = step_rows(rows), peer = step_rows(peer_rows);
  KESTREL_CHECK(!b.empty(), "overlap bandwidth: no overlapped step ", step, " at a cap of ", cap_mb, " MB to draw");
  const bool with_peer = !peer.empty() && b[0]->start_us > 0 && peer[0]->start_us > 0;
  // Times in ms since rank 0's step began; each rank's backward starts at its pre.
  const double pre = b[0]->pre_us / 1e3, bwd = b[0]->backward_us / 1e3, fin = b[0]->finalize_us / 1e3;
  const double peer_shift = with_peer ? (peer[0]->start_us - b[0]->start_us) / 1e3 : 0;
  double end = pre + fin;
  for (const TimelineRow* r : b) end = std::max(end, pre + r->done_us / 1e3);
  if (with_peer) end = std::max(end, peer_shift + (peer[0]->pre_us + peer[0]->finalize_us) / 1e3);
  const int height = with_peer ? 340 : 280;
  cv::Mat canvas(height, kWidth, CV_8UC3, kWhite);
  ChartStyle st = style(true, false);
  st.left = 175;
  const double rows_top = with_peer ? 3 : 2;
  Chart c(canvas, {0, 0, kWidth, height}, title, 0, end * 1.02, 0, rows_top, st);
  auto compute_row = [&](double y, double start, double p, double bw, double f) {
    c.cell(start, y + 0.2, start + p, y + 0.8, kGrey);
    c.cell(start + p, y + 0.2, start + p + bw, y + 0.8, yolo::tab10(0));
    c.cell(start + p + bw, y + 0.2, start + p + f, y + 0.8, yolo::tab10(3));
  };
  compute_row(rows_top - 1, 0, pre, bwd, fin);
  if (with_peer)
    compute_row(0, peer_shift, peer[0]->pre_us / 1e3, peer[0]->backward_us / 1e3, peer[0]->finalize_us / 1e3);
  const double comm_y = with_peer ? 1 : 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double launch = pre + b[i]->launch_us / 1e3, done = pre + b[i]->done_us / 1e3;
    const cv::Scalar colour = i % 2 ? yolo::tab10(1) : yolo::tab10(4);
    c.cell(launch, comm_y + 0.25, done, comm_y + 0.75, colour);
    const double ready = pre + b[i]->ready_us / 1e3;
    c.line({ready, ready}, {comm_y + 0.8, comm_y + 1.15}, kGrey, 1);
    char size[32];
    std::snprintf(size, sizeof size, "%.1f", static_cast<double>(b[i]->bytes) / (1024.0 * 1024.0));
    const cv::Point p = c.to_pixel((launch + done) / 2, comm_y + 0.5);
    if (c.to_pixel(done, 0).x - c.to_pixel(launch, 0).x > 28)
      yolo::put_text(canvas, size, p, 0.4, yolo::Align::kCentre, yolo::Align::kCentre, kWhite);
  }
  c.close();
  std::vector<std::pair<double, std::string>> labels{{rows_top - 0.5, "rank 0 compute"},
                                                     {comm_y + 0.5, "rank 0 all-reduce"}};
  if (with_peer) labels.push_back({0.5, "rank 1 compute"});
  for (const auto& [y, text] : labels) {
    const cv::Point p = c.to_pixel(0, y);
    yolo::put_text(canvas, text, {p.x - 8, p.y}, kFont, yolo::Align::kEnd, yolo::Align::kCentre);
  }
  c.x_label("ms: forward (grey), backward (blue), wait for gradients (red); buckets in MB");
  yolo::save_plot(png_path, canvas);
}

}  // namespace kestrel::bench::overlap
