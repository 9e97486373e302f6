// confusion_matrix.png as the reference draws it (seaborn heatmap, 12 x 9 inches at 250 dpi):
// columns normalised, values under 0.005 left blank, Blues from 0 to the largest value, a colour
// bar, numbers in the cells below 30 classes and class names on the axes below 99 names.
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {
namespace {

constexpr int kWidth = 3000, kHeight = 2250, kTop = 110, kColourBar = 60;
const cv::Scalar kWhite(255, 255, 255);

std::string tick_name(int i, int nc, const std::vector<std::string>& names, bool named) {
  if (!named) return std::to_string(i);
  const std::string& name = i < nc ? names[i] : "background";
  return name.size() > 18 ? name.substr(0, 17) + "." : name;
}

}  // namespace

void plot_confusion_matrix(const std::vector<std::vector<double>>& matrix,
                           const std::vector<std::string>& names, const std::string& path) {
  const int n = static_cast<int>(matrix.size()), nc = n - 1;
  KESTREL_CHECK(n > 0, "plot_confusion_matrix: empty matrix");
  std::vector<std::vector<double>> norm(n, std::vector<double>(n, NAN));
  double vmax = 0;
  for (int c = 0; c < n; ++c) {
    double total = 0;
    for (int r = 0; r < n; ++r) total += matrix[r][c];
    for (int r = 0; r < n; ++r) {
      const double v = matrix[r][c] / (total + 1e-9);
      if (v >= 0.005) norm[r][c] = v, vmax = std::max(vmax, v);
    }
  }
  if (vmax <= 0) vmax = 1;

  const bool named = nc > 0 && nc < 99 && static_cast<int>(names.size()) == nc;
  // Names scale with the cells, between readable-small and the axis labels' size.
  const int guess = (kHeight - kTop - 400) / n;
  const double name_font = std::clamp(guess / 30.0, 0.5, 1.1), label_font = 1.3;
  int name_width = 0;
  for (int i = 0; i < n; ++i)
    name_width = std::max(name_width, text_size(tick_name(i, nc, names, named), name_font).width);
  const int label_room = text_size("Predicted", label_font).height + 40;
  constexpr int kTick = 12;
  const int left = label_room + name_width + kTick + 30, bottom = label_room + name_width + kTick + 30;
  const int side = std::min(kHeight - kTop - bottom, kWidth - left - kColourBar - 260);
  const int cell = std::max(1, side / n), size = cell * n;
  const int x0 = left + (kWidth - left - size - kColourBar - 260) / 2, y0 = kTop;

  cv::Mat canvas(kHeight, kWidth, CV_8UC3, kWhite);
  put_text(canvas, "Confusion Matrix", {x0 + size / 2, kTop / 2}, label_font, Align::kCentre, Align::kCentre);
  const double annot_font = std::clamp(cell / 110.0, 0.45, 1.2);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      const double v = norm[r][c];
      const cv::Rect box(x0 + c * cell, y0 + r * cell, cell, cell);
      if (std::isfinite(v)) cv::rectangle(canvas, box, blues(v / vmax), cv::FILLED);
      if (nc < 30 && std::isfinite(v)) {
        char text[16];
        std::snprintf(text, sizeof text, "%.2f", v);
        put_text(canvas, text, {box.x + cell / 2, box.y + cell / 2}, annot_font, Align::kCentre, Align::kCentre,
                 v / vmax > 0.6 ? kWhite : kPlotInk);
      }
    }
  cv::rectangle(canvas, {x0, y0, size, size}, cv::Scalar(200, 200, 200), 1);
  // Tick labels: every cell when named (or few), else about 20 evenly spaced indices.
  const int every = named || n <= 30 ? 1 : (n + 19) / 20;
  const int tick = kTick;
  for (int i = 0; i < n; i += every) {
    const std::string name = tick_name(i, nc, names, named);
    const int mid = i * cell + cell / 2;
    cv::line(canvas, {x0 - tick, y0 + mid}, {x0, y0 + mid}, kPlotInk, 1);
    put_text(canvas, name, {x0 - tick - 6, y0 + mid}, name_font, Align::kEnd, Align::kCentre);
    cv::line(canvas, {x0 + mid, y0 + size}, {x0 + mid, y0 + size + tick}, kPlotInk, 1);
    put_text_vertical(canvas, name, {x0 + mid, y0 + size + tick + 6}, name_font, Align::kCentre, Align::kStart);
  }
  put_text(canvas, "True", {x0 + size / 2, kHeight - 20}, label_font, Align::kCentre, Align::kEnd);
  put_text_vertical(canvas, "Predicted", {x0 - tick - name_width - 30, y0 + size / 2}, label_font, Align::kEnd,
                    Align::kCentre);

  // The colour bar: the map from 0 (bottom) to vmax (top), with round ticks.
  const int bx = x0 + size + 60;
  for (int y = 0; y < size; ++y)
    cv::line(canvas, {bx, y0 + y}, {bx + kColourBar, y0 + y}, blues(1.0 - static_cast<double>(y) / size), 1);
  cv::rectangle(canvas, {bx, y0, kColourBar, size}, kPlotInk, 1);
  const std::vector<double> ticks = nice_ticks(0, vmax, 6);
  for (double t : ticks) {
    const int y = y0 + size - static_cast<int>(std::lround(t / vmax * size));
    cv::line(canvas, {bx + kColourBar, y}, {bx + kColourBar + 10, y}, kPlotInk, 1);
    put_text(canvas, tick_label(t, ticks.size() > 1 ? ticks[1] - ticks[0] : t), {bx + kColourBar + 16, y}, 0.9,
             Align::kStart, Align::kCentre);
  }
  save_plot(path, canvas);
}

}  // namespace kestrel::yolo
