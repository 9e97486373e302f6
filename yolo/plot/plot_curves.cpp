// PR_curve.png and the metric-confidence curves (F1_curve.png, P_curve.png, R_curve.png), laid out
// as the reference's 9 x 6 inch figures: the plot area on the left, the legend outside it on the
// right.
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "yolo/common/smooth.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {
namespace {

// 9 x 6 inches at 150 dpi; matplotlib's 10 pt text is about 21 px there, its 1 pt and 3 pt lines
// 2 and 6 px.
constexpr int kWidth = 1350, kHeight = 900;
constexpr double kFont = 0.7;
constexpr int kThin = 2, kThick = 6;
constexpr int kMaxNamedClasses = 20;  // the reference names classes in the legend below 21
// matplotlib's 'blue' and 'grey' (BGR).
const cv::Scalar kWhite(255, 255, 255), kBlue(255, 0, 0), kGrey(128, 128, 128);

std::vector<double> mean_curve(size_t points, const std::vector<std::vector<double>>& py) {
  std::vector<double> mean(points, 0);
  for (const auto& y : py)
    for (size_t i = 0; i < points && i < y.size(); ++i) mean[i] += y[i] / py.size();
  return mean;
}

// A unit-square chart with per-class lines, a bold mean and the legend on the right.
void draw_curves(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                 const std::vector<double>& mean, const std::vector<std::string>& labels,
                 const std::string& mean_label, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel, const std::string& path) {
  const bool named = !py.empty() && py.size() <= kMaxNamedClasses;
  std::vector<LegendEntry> legend;
  if (named)
    for (size_t c = 0; c < py.size(); ++c)
      legend.push_back({c < labels.size() ? labels[c] : std::to_string(c), tab10(static_cast<int>(c)), kThin});
  legend.push_back({mean_label, kBlue, kThick});
  int legend_width = 0;
  for (const auto& e : legend) legend_width = std::max(legend_width, text_size(e.text, kFont).width);
  legend_width += 100;

  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  ChartStyle style;
  style.font = kFont;
  style.left = 90, style.right = 20, style.top = 50, style.bottom = 80;
  style.max_ticks = 6;
  const int chart_width = std::max(kWidth / 2, kWidth - legend_width - 30);
  Chart chart(canvas, {0, 0, chart_width, kHeight}, title, 0, 1, 0, 1, style);
  for (size_t c = 0; c < py.size(); ++c)
    chart.line(px, py[c], named ? tab10(static_cast<int>(c)) : kGrey, kThin);
  chart.line(px, mean, kBlue, kThick);
  chart.close();
  chart.x_label(xlabel);
  chart.y_label(ylabel);
  draw_legend(canvas, legend, {chart.area().x + chart.area().width + 20, chart.area().y}, kFont);
  save_plot(path, canvas);
}

}  // namespace

void plot_pr_curve(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                   const std::vector<double>& ap50, const std::vector<std::string>& names,
                   const std::string& path, std::optional<double> map50) {
  std::vector<std::string> labels;
  double map = 0;
  for (size_t c = 0; c < py.size(); ++c) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.3f", c < ap50.size() ? ap50[c] : 0.0);
    labels.push_back((c < names.size() ? names[c] : std::to_string(c)) + buf);
  }
  for (double a : ap50) map += a / std::max<size_t>(1, ap50.size());
  if (map50) map = *map50;
  char mean_label[64];
  std::snprintf(mean_label, sizeof mean_label, "all classes %.3f mAP@0.5", map);
  draw_curves(px, py, mean_curve(px.size(), py), labels, mean_label, "Precision-Recall Curve", "Recall",
              "Precision", path);
}

std::string mc_curve_summary(const std::vector<double>& px, const std::vector<std::vector<double>>& py) {
  KESTREL_CHECK(!px.empty(), "mc_curve_summary: empty confidence grid");
  const std::vector<double> y = smooth(mean_curve(px.size(), py), 0.05);
  const size_t best = std::max_element(y.begin(), y.end()) - y.begin();
  char buf[64];
  std::snprintf(buf, sizeof buf, "all classes %.2f at %.3f", y[best], px[best]);
  return buf;
}

void plot_mc_curve(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                   const std::vector<std::string>& names, const std::string& ylabel,
                   const std::string& path) {
  KESTREL_CHECK(!px.empty(), "plot_mc_curve: empty confidence grid for ", path);
  draw_curves(px, py, smooth(mean_curve(px.size(), py), 0.05), names, mc_curve_summary(px, py),
              ylabel + "-Confidence Curve", "Confidence", ylabel, path);
}

}  // namespace kestrel::yolo
