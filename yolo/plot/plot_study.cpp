// study.png (plots.h's plot_val_study).
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {
namespace {

struct StudyCurve {
  std::string label;
  std::vector<double> ms, ap;  // inference ms per image, mAP50-95 x 100
};

// A study_*.txt's rows: P R mAP50 mAP50-95 box obj cls pre inf nms; the points from the second
// size up to the best mAP50-95, as the reference draws them.
StudyCurve read_study(const std::filesystem::path& file) {
  std::ifstream in(file);
  KESTREL_CHECK(in, "cannot read ", file.string());
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    std::vector<double> row;
    for (double v; ss >> v;) row.push_back(v);
    KESTREL_CHECK(row.size() == 10 || row.empty(), file.string(), ": a study row has 10 numbers, got ", row.size());
    if (!row.empty()) rows.push_back(row);
  }
  StudyCurve c;
  c.label = file.stem().string();
  if (c.label.rfind("study_", 0) == 0) c.label = c.label.substr(6);
  size_t best = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i][3] > rows[best][3]) best = i;
  for (size_t i = 1; i <= best && i < rows.size(); ++i) {
    c.ms.push_back(rows[i][8]);
    c.ap.push_back(rows[i][3] * 100.0);
  }
  return c;
}

}  // namespace

void plot_val_study(const std::string& folder, const std::string& png_path) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("study", 0) == 0 && e.path().extension() == ".txt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<StudyCurve> curves;
  double x1 = 1, y0 = 1e9, y1 = 0;
  for (const auto& f : files) {
    curves.push_back(read_study(f));
    for (double v : curves.back().ms) x1 = std::max(x1, v);
    for (double v : curves.back().ap) y0 = std::min(y0, v), y1 = std::max(y1, v);
  }
  if (y0 > y1) y0 = 0, y1 = 1;
  const cv::Scalar white(255, 255, 255);
  cv::Mat canvas(900, 1200, CV_8UC3, white);
  ChartStyle style;
  style.font = 0.7;
  style.left = 90, style.right = 30, style.top = 50, style.bottom = 80;
  const double pad = std::max({0.1 * (y1 - y0), 0.1 * y1, 0.01});
  Chart chart(canvas, {0, 0, 1200, 900}, "", 0, x1 * 1.1, std::max(0.0, y0 - pad), y1 + pad, style);
  std::vector<LegendEntry> legend;
  for (size_t i = 0; i < curves.size(); ++i) {
    chart.line(curves[i].ms, curves[i].ap, tab10(static_cast<int>(i)), 2, /*markers=*/true);
    legend.push_back({curves[i].label, tab10(static_cast<int>(i)), 2});
  }
  chart.close();
  chart.x_label("Speed (ms/img)");
  chart.y_label("AP val (mAP50-95 x 100)");
  if (!legend.empty()) draw_legend(canvas, legend, {chart.area().x + 20, chart.area().y + 20}, 0.7);
  save_plot(png_path, canvas);
}

}  // namespace kestrel::yolo
