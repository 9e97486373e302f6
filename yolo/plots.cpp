#include "yolo/plots.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "kernels/error.h"
#include "yolo/data/image_codec.h"
#include "yolo/plot_canvas.h"

namespace kestrel::yolo {
namespace {

const cv::Scalar kWhite(255, 255, 255), kBlue(180, 119, 31), kOrange(14, 127, 255);

void save(const std::string& path, const cv::Mat& image) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".png")
    data::write_png(path, image);
  else
    data::write_jpeg(path, image, 92);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Moving average over a window of about a tenth of the series, as a guide to the eye.
std::vector<double> smooth(const std::vector<double>& y) {
  const int half = std::max<int>(1, static_cast<int>(y.size() / 20));
  std::vector<double> out(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    double s = 0;
    int n = 0;
    for (int k = -half; k <= half; ++k) {
      const long j = static_cast<long>(i) + k;
      if (j >= 0 && j < static_cast<long>(y.size()) && std::isfinite(y[j])) s += y[j], ++n;
    }
    out[i] = n ? s / n : NAN;
  }
  return out;
}

std::pair<double, double> finite_range(const std::vector<double>& v) {
  double lo = INFINITY, hi = -INFINITY;
  for (double x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!std::isfinite(lo)) return {0, 1};
  if (hi - lo < 1e-12) return {lo - 0.5, hi + 0.5};
  const double pad = (hi - lo) * 0.05;
  return {lo - pad, hi + pad};
}

}  // namespace

void plot_results(const std::string& csv_path, const std::string& png_path) {
  std::ifstream in(csv_path);
  KESTREL_CHECK(in, "cannot read '", csv_path, "' to plot it");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  {
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) header.push_back(trim(cell));
  }
  std::vector<std::vector<double>> columns(header.size());
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    size_t c = 0;
    for (std::string cell; std::getline(ss, cell, ',') && c < columns.size(); ++c) {
      try {
        columns[c].push_back(std::stod(cell));
      } catch (const std::exception&) {
        columns[c].push_back(NAN);
      }
    }
  }
  KESTREL_CHECK(!header.empty() && header[0] == "epoch", "'", csv_path,
                "' is not a results.csv (first column must be epoch)");
  // The reference's order: losses and metrics of training on top, validation below.
  const std::vector<std::string> order = {
      "train/box_loss", "train/obj_loss", "train/cls_loss", "metrics/precision", "metrics/recall",
      "val/box_loss",   "val/obj_loss",   "val/cls_loss",   "metrics/mAP_0.5",   "metrics/mAP_0.5:0.95"};
  const int cw = 320, ch = 260;
  cv::Mat canvas(2 * ch, 5 * cw, CV_8UC3, kWhite);
  const std::vector<double>& epochs = columns[0];
  for (size_t k = 0; k < order.size(); ++k) {
    auto it = std::find(header.begin(), header.end(), order[k]);
    if (it == header.end()) continue;
    const std::vector<double>& y = columns[it - header.begin()];
    const auto [lo, hi] = finite_range(y);
    const auto [x0, x1] = epochs.empty() ? std::pair<double, double>{0, 1}
                                         : std::pair<double, double>{epochs.front(), std::max(epochs.back(), epochs.front() + 1)};
    Chart chart(canvas, cv::Rect(static_cast<int>(k % 5) * cw, static_cast<int>(k / 5) * ch, cw, ch),
                order[k], x0, x1, lo, hi);
    chart.line(epochs, y, kBlue, 2, true);
    chart.dashed(epochs, smooth(y), kOrange);
  }
  save(png_path, canvas);
}

void plot_labels(const std::vector<data::ImageRecord>& records,
                 const std::vector<std::string>& names, const std::string& path) {
  const int nc = std::max<int>(1, static_cast<int>(names.size()));
  std::vector<double> counts(nc, 0);
  std::vector<data::LabelBox> boxes;
  for (const auto& r : records)
    for (const auto& b : r.boxes) {
      if (b.cls >= 0 && b.cls < nc) counts[b.cls] += 1;
      boxes.push_back(b);
    }
  const int cell = 400;
  cv::Mat canvas(2 * cell, 2 * cell, CV_8UC3, kWhite);
  {
    Chart chart(canvas, {0, 0, cell, cell}, "instances per class", 0, nc, 0,
                *std::max_element(counts.begin(), counts.end()) * 1.05 + 1);
    for (int c = 0; c < nc; ++c) chart.bar(c + 0.1, 0.8, counts[c], class_colour(c));
    chart.x_label("class");
  }
  {
    // All boxes drawn centred on a 1x1 canvas, as the reference's fourth panel.
    cv::Rect frame(cell, 0, cell, cell);
    cv::Mat panel = canvas(cv::Rect(cell + 40, 30, cell - 60, cell - 60));
    const size_t shown = std::min<size_t>(boxes.size(), 1000);
    for (size_t i = 0; i < shown; ++i) {
      const auto& b = boxes[i];
      const int w = static_cast<int>(b.w * panel.cols), h = static_cast<int>(b.h * panel.rows);
      cv::rectangle(panel, cv::Rect(panel.cols / 2 - w / 2, panel.rows / 2 - h / 2, w, h),
                    class_colour(b.cls), 1);
    }
    cv::putText(canvas, "boxes (centred)", {frame.x + 52, 18}, cv::FONT_HERSHEY_SIMPLEX, 0.5,
                {40, 40, 40}, 1, cv::LINE_AA);
  }
  {
    Chart chart(canvas, {0, cell, cell, cell}, "centres", 0, 1, 0, 1);
    for (const auto& b : boxes) chart.point(b.x, 1 - b.y, class_colour(b.cls), 2);
    chart.x_label("x");
  }
  {
    Chart chart(canvas, {cell, cell, cell, cell}, "sizes", 0, 1, 0, 1);
    for (const auto& b : boxes) chart.point(b.w, b.h, class_colour(b.cls), 2);
    chart.x_label("width");
  }
  save(path, canvas);
}

std::vector<PlotBox> target_boxes(const Tensor& targets, int64_t height, int64_t width) {
  std::vector<PlotBox> out;
  if (!targets.defined() || targets.numel() == 0) return out;
  const std::vector<double> t = targets.to_double_vector();
  const int64_t cols = targets.size(-1);
  for (size_t i = 0; i + cols <= t.size(); i += cols) {
    PlotBox b;
    b.image = static_cast<int>(t[i]);
    b.cls = static_cast<int>(t[i + 1]);
    b.x1 = static_cast<float>((t[i + 2] - t[i + 4] / 2) * width);
    b.y1 = static_cast<float>((t[i + 3] - t[i + 5] / 2) * height);
    b.x2 = static_cast<float>((t[i + 2] + t[i + 4] / 2) * width);
    b.y2 = static_cast<float>((t[i + 3] + t[i + 5] / 2) * height);
    out.push_back(b);
  }
  return out;
}

void plot_batch(const Tensor& images_in, const std::vector<PlotBox>& boxes,
                const std::vector<std::string>& names, const std::string& path, float conf_min) {
  KESTREL_CHECK(images_in.dim() == 4 && images_in.size(3) == 3 && images_in.dtype() == DType::U8,
                "plot_batch needs u8 NHWC RGB images, got ", images_in.describe());
  Tensor images = images_in.to(Device::cpu()).contiguous();
  const int64_t n = std::min<int64_t>(images.size(0), 16), h = images.size(1), w = images.size(2);
  const int grid = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
  // Mosaics larger than 1920 px are scaled down, as the reference does.
  const double scale = std::min(1.0, 1920.0 / (grid * std::max(h, w)));
  const int th = static_cast<int>(h * scale), tw = static_cast<int>(w * scale);
  cv::Mat mosaic(grid * th, grid * tw, CV_8UC3, kWhite);
  for (int64_t i = 0; i < n; ++i) {
    cv::Mat rgb(static_cast<int>(h), static_cast<int>(w), CV_8UC3, images.data<uint8_t>() + i * h * w * 3);
    cv::Mat bgr, tile;
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
    cv::resize(bgr, tile, {tw, th}, 0, 0, cv::INTER_AREA);
    const cv::Rect cell(static_cast<int>(i % grid) * tw, static_cast<int>(i / grid) * th, tw, th);
    tile.copyTo(mosaic(cell));
    cv::rectangle(mosaic, cell, kWhite, 2);
    for (const PlotBox& b : boxes) {
      if (b.image != i || (b.conf >= 0 && b.conf < conf_min)) continue;
      const cv::Point p1(cell.x + static_cast<int>(b.x1 * scale), cell.y + static_cast<int>(b.y1 * scale));
      const cv::Point p2(cell.x + static_cast<int>(b.x2 * scale), cell.y + static_cast<int>(b.y2 * scale));
      cv::rectangle(mosaic, p1, p2, class_colour(b.cls), 2);
      std::string text = b.cls >= 0 && b.cls < static_cast<int>(names.size()) ? names[b.cls] : std::to_string(b.cls);
      if (b.conf >= 0) text.append(1, ' ').append(short_number(b.conf));
      draw_label(mosaic, text, p1, class_colour(b.cls));
    }
  }
  save(path, mosaic);
}

void plot_confusion_matrix(const std::vector<std::vector<double>>& matrix,
                           const std::vector<std::string>& names, const std::string& path) {
  const int n = static_cast<int>(matrix.size());
  KESTREL_CHECK(n > 0, "plot_confusion_matrix: empty matrix");
  const int cellpx = std::clamp(720 / n, 8, 60), margin = 110;
  cv::Mat canvas(n * cellpx + margin + 20, n * cellpx + margin + 20, CV_8UC3, kWhite);
  for (int c = 0; c < n; ++c) {
    double total = 0;
    for (int r = 0; r < n; ++r) total += matrix[r][c];
    for (int r = 0; r < n; ++r) {
      const double v = total > 0 ? matrix[r][c] / total : 0;
      const cv::Rect cell(margin + c * cellpx, margin + r * cellpx, cellpx, cellpx);
      const double shade = 255 * (1 - v);
      cv::rectangle(canvas, cell, cv::Scalar(255, shade * 0.8 + 40, shade), cv::FILLED);
      if (cellpx >= 30 && v > 0)
        cv::putText(canvas, short_number(v), {cell.x + 3, cell.y + cellpx / 2 + 4},
                    cv::FONT_HERSHEY_SIMPLEX, 0.35, v > 0.5 ? kWhite : cv::Scalar(40, 40, 40), 1, cv::LINE_AA);
    }
  }
  if (cellpx >= 14) {
    for (int i = 0; i < n; ++i) {
      const std::string name = i < static_cast<int>(names.size()) ? names[i] : "background";
      cv::putText(canvas, name.substr(0, 12), {4, margin + i * cellpx + cellpx / 2 + 4},
                  cv::FONT_HERSHEY_SIMPLEX, 0.35, {40, 40, 40}, 1, cv::LINE_AA);
      cv::Mat label(cellpx, margin - 4, CV_8UC3, kWhite);
      cv::putText(label, name.substr(0, 12), {2, cellpx / 2 + 4}, cv::FONT_HERSHEY_SIMPLEX, 0.35,
                  {40, 40, 40}, 1, cv::LINE_AA);
      cv::Mat rotated;
      cv::rotate(label, rotated, cv::ROTATE_90_COUNTERCLOCKWISE);
      rotated.copyTo(canvas(cv::Rect(margin + i * cellpx, 2, cellpx, margin - 4)));
    }
  }
  cv::putText(canvas, "True", {margin + n * cellpx / 2 - 10, n * cellpx + margin + 16},
              cv::FONT_HERSHEY_SIMPLEX, 0.45, {40, 40, 40}, 1, cv::LINE_AA);
  save(path, canvas);
}

void plot_pr_curve(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                   const std::vector<double>& ap50, const std::vector<std::string>& names,
                   const std::string& path) {
  cv::Mat canvas(640, 900, CV_8UC3, kWhite);
  Chart chart(canvas, {0, 0, 640, 640}, "Precision-Recall", 0, 1, 0, 1);
  std::vector<double> mean(px.size(), 0);
  for (size_t c = 0; c < py.size(); ++c) {
    if (py.size() < 21) chart.line(px, py[c], class_colour(static_cast<int>(c)), 1);
    for (size_t i = 0; i < px.size() && i < py[c].size(); ++i) mean[i] += py[c][i] / py.size();
  }
  chart.line(px, mean, kBlue, 3);
  chart.x_label("Recall");
  chart.y_label("Precision");
  double map = 0;
  for (double a : ap50) map += a / std::max<size_t>(1, ap50.size());
  int y = 40;
  draw_label(canvas, "all classes " + short_number(map) + " mAP@0.5", {650, y}, kBlue, 0.45);
  for (size_t c = 0; c < ap50.size() && c < 20; ++c) {
    y += 24;
    const std::string name = c < names.size() ? names[c] : std::to_string(c);
    draw_label(canvas, name + " " + short_number(ap50[c]), {650, y}, class_colour(static_cast<int>(c)), 0.4);
  }
  save(path, canvas);
}

}  // namespace kestrel::yolo
