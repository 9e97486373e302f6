// evolve.png: one panel per evolved key, each generation's value against its fitness, points
// coloured by how crowded their neighbourhood is (dark: alone, yellow: many), the fittest
// generation marked with a black cross and named in the panel's title, as the reference's
// plot_evolve lays it out (6 rows of 5).
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

#include "yolo/data/image_codec.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/train/evolve.h"

namespace kestrel::yolo {
namespace {

constexpr int kColumns = 5, kPanelWidth = 300, kPanelHeight = 260, kBins = 20;

std::pair<double, double> padded_range(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double span = *hi - *lo;
  if (span < 1e-12) return {*lo - 0.5 * std::max(1e-3, std::abs(*lo)), *hi + 0.5 * std::max(1e-3, std::abs(*hi))};
  return {*lo - 0.05 * span, *hi + 0.05 * span};
}

// Count of the points in each point's cell of a kBins x kBins histogram over the ranges.
std::vector<int> crowding(const std::vector<double>& x, const std::vector<double>& y,
                          std::pair<double, double> xr, std::pair<double, double> yr) {
  auto bin = [](double v, std::pair<double, double> r) {
    const int b = static_cast<int>((v - r.first) / (r.second - r.first) * kBins);
    return std::clamp(b, 0, kBins - 1);
  };
  std::vector<int> counts(kBins * kBins, 0), out(x.size());
  for (size_t i = 0; i < x.size(); ++i) ++counts[bin(x[i], xr) * kBins + bin(y[i], yr)];
  for (size_t i = 0; i < x.size(); ++i) out[i] = counts[bin(x[i], xr) * kBins + bin(y[i], yr)];
  return out;
}

// Dark purple to yellow (BGR), as viridis runs.
cv::Scalar crowd_colour(double t) {
  const cv::Scalar a(84, 1, 68), b(37, 231, 253);
  return a * (1 - t) + b * t;
}

}  // namespace

void plot_evolve(const std::string& csv_path, const std::string& png_path) {
  const EvolveTable table = read_evolve_csv(csv_path);
  if (table.rows.empty()) return;
  const size_t kResults = table.results;
  std::vector<double> fitness;
  for (size_t r = 0; r < table.rows.size(); ++r) fitness.push_back(table.fitness(r));
  const size_t best = std::max_element(fitness.begin(), fitness.end()) - fitness.begin();
  const size_t keys = table.keys.size() - kResults;
  const int rows = static_cast<int>((keys + kColumns - 1) / kColumns);
  cv::Mat canvas(rows * kPanelHeight, kColumns * kPanelWidth, CV_8UC3, cv::Scalar(255, 255, 255));
  const std::pair<double, double> fr = padded_range(fitness);
  for (size_t k = 0; k < keys; ++k) {
    std::vector<double> values;
    for (const auto& row : table.rows) values.push_back(row[kResults + k]);
    const std::pair<double, double> vr = padded_range(values);
    const cv::Rect frame(static_cast<int>(k % kColumns) * kPanelWidth,
                         static_cast<int>(k / kColumns) * kPanelHeight, kPanelWidth, kPanelHeight);
    Chart chart(canvas, frame, table.keys[kResults + k] + " = " + short_number(values[best]),
                vr.first, vr.second, fr.first, fr.second);
    const std::vector<int> crowd = crowding(values, fitness, vr, fr);
    const int most = *std::max_element(crowd.begin(), crowd.end());
    for (size_t i = 0; i < values.size(); ++i)
      chart.point(values[i], fitness[i],
                  crowd_colour(most > 1 ? double(crowd[i] - 1) / (most - 1) : 0.0), 4);
    const cv::Point p = chart.to_pixel(values[best], fitness[best]);
    cv::line(canvas, p - cv::Point(9, 0), p + cv::Point(9, 0), cv::Scalar(0, 0, 0), 2, cv::LINE_AA);
    cv::line(canvas, p - cv::Point(0, 9), p + cv::Point(0, 9), cv::Scalar(0, 0, 0), 2, cv::LINE_AA);
    if (k % kColumns == 0) chart.y_label("fitness");
  }
  data::write_png(png_path, canvas);
}

}  // namespace kestrel::yolo
