// labels.jpg and labels_correlogram.jpg: what the training labels look like, as the reference's
// plot_labels draws them (class counts, 2-D histograms of centres and sizes, the boxes drawn
// centred; and seaborn's corner pairplot of x, y, width, height).
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>

#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {
namespace {

const cv::Scalar kWhite(255, 255, 255), kBar(180, 119, 31);
constexpr int kBins = 50;

std::vector<data::LabelBox> all_boxes(const std::vector<data::ImageRecord>& records) {
  std::vector<data::LabelBox> boxes;
  for (const auto& r : records) boxes.insert(boxes.end(), r.boxes.begin(), r.boxes.end());
  return boxes;
}

int bin_of(double v) { return std::clamp(static_cast<int>(v * kBins), 0, kBins - 1); }

// seaborn's pmax: the colour scale tops out at the count above which the fullest cells hold
// (1 - pmax) of all counts, so a few crowded cells do not wash out the rest.
double colour_max(std::vector<double> counts, double pmax) {
  std::sort(counts.begin(), counts.end(), std::greater<>());
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  if (total <= 0) return 1;
  double sum = 0;
  for (double c : counts)
    if ((sum += c) / total >= 1 - pmax) return std::max(c, 1.0);
  return std::max(counts.back(), 1.0);
}

// A 50 x 50 histogram of (x, y) over the unit square, in Blues; empty bins stay white.
void histogram_2d(Chart& chart, const std::vector<double>& xs, const std::vector<double>& ys) {
  std::vector<double> counts(kBins * kBins, 0);
  for (size_t i = 0; i < xs.size(); ++i) counts[bin_of(ys[i]) * kBins + bin_of(xs[i])] += 1;
  const double top = colour_max(counts, 0.9);
  for (int by = 0; by < kBins; ++by)
    for (int bx = 0; bx < kBins; ++bx)
      if (const double c = counts[by * kBins + bx]; c > 0)
        chart.cell(bx / double(kBins), by / double(kBins), (bx + 1) / double(kBins), (by + 1) / double(kBins),
                   blues(0.25 + 0.75 * std::min(1.0, c / top)));
  chart.close();
}

// A 50-bin histogram of v over [0, 1].
void histogram_1d(cv::Mat& canvas, cv::Rect frame, const std::vector<double>& v, const ChartStyle& style) {
  std::vector<double> counts(kBins, 0);
  for (double x : v) counts[bin_of(x)] += 1;
  const double top = *std::max_element(counts.begin(), counts.end());
  Chart chart(canvas, frame, "", 0, 1, 0, top * 1.05 + 1, style);
  for (int b = 0; b < kBins; ++b)
    if (counts[b] > 0) chart.bar(b / double(kBins), 1.0 / kBins, counts[b], kBar);
  chart.close();
}

ChartStyle panel_style() {
  ChartStyle s;
  s.font = 0.55;
  s.left = 95, s.right = 20, s.top = 30, s.bottom = 75;
  s.max_ticks = 5;
  return s;
}

}  // namespace

void plot_labels(const std::vector<data::ImageRecord>& records,
                 const std::vector<std::string>& names, const std::string& path) {
  const int nc = std::max<int>(1, static_cast<int>(names.size()));
  const std::vector<data::LabelBox> boxes = all_boxes(records);
  std::vector<double> counts(nc, 0), x, y, w, h;
  for (const auto& b : boxes) {
    if (b.cls >= 0 && b.cls < nc) counts[b.cls] += 1;
    x.push_back(b.x), y.push_back(b.y), w.push_back(b.w), h.push_back(b.h);
  }
  const int cell = 800;
  cv::Mat canvas(2 * cell, 2 * cell, CV_8UC3, kWhite);
  ChartStyle style = panel_style();
  {
    // Class names under the bars below 30 classes (as the reference), else the axis says "classes".
    ChartStyle bars = style;
    const bool named = nc < 30;
    int name_width = 0;
    if (named)
      for (const auto& n : names) name_width = std::max(name_width, text_size(n, style.font).width);
    bars.bottom = named ? std::min(300, name_width + 30) : style.bottom;
    bars.x_ticks = !named;
    bars.integer_x = true;
    Chart chart(canvas, {0, 0, cell, cell}, "", -0.5, nc - 0.5, 0,
                *std::max_element(counts.begin(), counts.end()) * 1.05 + 1, bars);
    for (int c = 0; c < nc; ++c) chart.bar(c - 0.4, 0.8, counts[c], class_colour(c));
    chart.close();
    chart.y_label("instances");
    if (named)
      for (int c = 0; c < nc; ++c)
        put_text_vertical(canvas, names[c], {chart.to_pixel(c, 0).x, chart.area().br().y + 8}, style.font,
                          Align::kCentre, Align::kStart);
    else
      chart.x_label("classes");
  }
  {
    // All boxes (up to 1000) drawn centred on one square, as the reference's second panel.
    const cv::Rect square(cell + 60, 60, cell - 120, cell - 120);
    cv::Mat panel = canvas(square);
    for (size_t i = 0; i < boxes.size() && i < 1000; ++i) {
      const auto& b = boxes[i];
      const int bw = static_cast<int>(b.w * panel.cols), bh = static_cast<int>(b.h * panel.rows);
      cv::rectangle(panel, cv::Rect(panel.cols / 2 - bw / 2, panel.rows / 2 - bh / 2, bw, bh),
                    class_colour(b.cls), 1, cv::LINE_AA);
    }
  }
  {
    Chart chart(canvas, {0, cell, cell, cell}, "", 0, 1, 0, 1, style);
    histogram_2d(chart, x, y);
    chart.x_label("x");
    chart.y_label("y");
  }
  {
    Chart chart(canvas, {cell, cell, cell, cell}, "", 0, 1, 0, 1, style);
    histogram_2d(chart, w, h);
    chart.x_label("width");
    chart.y_label("height");
  }
  save_plot(path, canvas);
}

void plot_labels_correlogram(const std::vector<data::ImageRecord>& records, const std::string& path) {
  std::array<std::vector<double>, 4> v;
  for (const auto& b : all_boxes(records)) {
    v[0].push_back(b.x), v[1].push_back(b.y), v[2].push_back(b.w), v[3].push_back(b.h);
  }
  const char* names[4] = {"x", "y", "width", "height"};
  const int cell = 500;
  cv::Mat canvas(4 * cell, 4 * cell, CV_8UC3, kWhite);
  const ChartStyle style = panel_style();
  // The lower triangle (corner=True): column j's variable across, row i's up.
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) {
      const cv::Rect frame(j * cell, i * cell, cell, cell);
      if (i == j) {
        histogram_1d(canvas, frame, v[i], style);
      } else {
        Chart chart(canvas, frame, "", 0, 1, 0, 1, style);
        histogram_2d(chart, v[j], v[i]);
      }
      if (i == 3) put_text(canvas, names[j], {frame.x + style.left + (cell - style.left - style.right) / 2,
                                              frame.y + cell - 6}, style.font * 1.25, Align::kCentre, Align::kEnd);
      if (j == 0)
        put_text_vertical(canvas, i == 0 ? "count" : names[i], {frame.x + 2, frame.y + style.top + (cell - style.top - style.bottom) / 2},
                          style.font * 1.25, Align::kStart, Align::kCentre);
    }
  save_plot(path, canvas);
}

}  // namespace kestrel::yolo
