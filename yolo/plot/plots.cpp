#include "yolo/plot/plots.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "yolo/data/image_codec.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"

namespace kestrel::yolo {
namespace {

const cv::Scalar kWhite(255, 255, 255), kBlue(180, 119, 31), kOrange(14, 127, 255), kRed(40, 39, 214);
const cv::Scalar kCaption(220, 220, 220);  // the reference's file-name colour

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
  // A constant series: a band of 5 % around it (0.5 around zero), so its value stays readable.
  if (hi - lo < 1e-12) {
    const double pad = lo != 0 ? std::abs(lo) * 0.05 : 0.5;
    return {lo - pad, hi + pad};
  }
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
  // Detection's: the reference's order (plot_results), losses and metrics of training on top,
  // validation below, five to a row. Segmentation's: plot_results_with_masks' 2 x 8 (train losses,
  // P and R of boxes and masks; val losses, mAPs of boxes and masks), with the best epoch (the seg
  // fitness: 0.1 mAP50 + 0.9 mAP50-95 of boxes and of masks) starred and its value in each title.
  // Any other results.csv (a classifier's): its columns in their order, five to a row.
  std::vector<std::string> order = {
      "train/box_loss", "train/obj_loss", "train/cls_loss", "metrics/precision", "metrics/recall",
      "val/box_loss",   "val/obj_loss",   "val/cls_loss",   "metrics/mAP_0.5",   "metrics/mAP_0.5:0.95"};
  const std::vector<std::string> seg_order = {
      "train/box_loss",       "train/seg_loss",          "train/obj_loss",       "train/cls_loss",
      "metrics/precision(B)", "metrics/recall(B)",       "metrics/precision(M)", "metrics/recall(M)",
      "val/box_loss",         "val/seg_loss",            "val/obj_loss",         "val/cls_loss",
      "metrics/mAP_0.5(B)",   "metrics/mAP_0.5:0.95(B)", "metrics/mAP_0.5(M)",   "metrics/mAP_0.5:0.95(M)"};
  const auto column = [&](const std::string& name) -> const std::vector<double>* {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? nullptr : &columns[it - header.begin()];
  };
  int per_row = 5;
  std::optional<size_t> best;  // row of the best epoch (segmentation)
  if (std::all_of(seg_order.begin(), seg_order.end(), [&](const std::string& n) { return column(n) != nullptr; })) {
    order = seg_order;
    per_row = 8;
    const auto &m50b = *column("metrics/mAP_0.5(B)"), &mb = *column("metrics/mAP_0.5:0.95(B)"),
               &m50m = *column("metrics/mAP_0.5(M)"), &mm = *column("metrics/mAP_0.5:0.95(M)");
    double top = -INFINITY;
    const size_t n = std::min({columns[0].size(), m50b.size(), mb.size(), m50m.size(), mm.size()});  // short rows
    for (size_t r = 0; r < n; ++r) {
      const double f = 0.9 * mb[r] + 0.1 * m50b[r] + 0.9 * mm[r] + 0.1 * m50m[r];
      if (std::isfinite(f) && f > top) top = f, best = r;  // the first of equals, as np.argmax
    }
  } else if (!column(order[0])) {
    order.assign(header.begin() + 1, header.end());
  }
  const int rows = std::max<int>(1, static_cast<int>((order.size() + per_row - 1) / per_row));
  // The reference's 12 x 6 inch figure at 200 dpi (for two rows of five).
  const int cw = 480, ch = 600;
  cv::Mat canvas(rows * ch, per_row * cw, CV_8UC3, kWhite);
  ChartStyle style;
  style.font = 0.6;
  style.left = 100, style.right = 20, style.top = 130, style.bottom = 60;
  style.max_ticks = 6;
  style.integer_x = true;
  const std::vector<double>& epochs = columns[0];
  for (size_t k = 0; k < order.size(); ++k) {
    const std::vector<double>* series = column(order[k]);
    if (!series) continue;
    const std::vector<double>& y = *series;
    const auto [lo, hi] = finite_range(y);
    const auto [x0, x1] = epochs.empty() ? std::pair<double, double>{0, 1}
                                         : std::pair<double, double>{epochs.front(), std::max(epochs.back(), epochs.front() + 1)};
    const cv::Rect frame(static_cast<int>(k % per_row) * cw, static_cast<int>(k / per_row) * ch, cw, ch);
    const bool starred = best && *best < y.size() && std::isfinite(y[*best]);
    const std::string title = starred ? order[k] + "  " + short_number(y[*best]) : order[k];
    Chart chart(canvas, frame, title, x0, x1, lo, hi, style);
    chart.line(epochs, y, kBlue, 2, true);
    chart.dotted(epochs, smooth(y), kOrange, 2);
    if (starred)
      cv::drawMarker(canvas, chart.to_pixel(epochs[*best], y[*best]), kRed, cv::MARKER_STAR, 22, 3, cv::LINE_AA);
    chart.close();
    // The legend sits between the title and the plot area, clear of the data.
    std::vector<LegendEntry> legend = {{"results", kBlue, 2}, {"smooth", kOrange, 2, true}};
    if (best) legend.push_back({"best: " + std::to_string(static_cast<int64_t>(epochs[*best])), kRed, 3});
    draw_legend(canvas, legend, {chart.area().x + chart.area().width - 190, frame.y + 50}, 0.5);
  }
  save_plot(png_path, canvas);
}

BatchMosaicLayout batch_mosaic_layout(int64_t images, int64_t height, int64_t width) {
  BatchMosaicLayout l;
  l.count = static_cast<int>(std::min<int64_t>(images, 16));
  l.grid = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(l.count))));
  // Mosaics larger than 1920 px are scaled down, each tile's sides rounded up, as the reference.
  l.scale = std::min(1.0, 1920.0 / l.grid / static_cast<double>(std::max(height, width)));
  l.tile_h = l.scale < 1 ? static_cast<int>(std::ceil(l.scale * height)) : static_cast<int>(height);
  l.tile_w = l.scale < 1 ? static_cast<int>(std::ceil(l.scale * width)) : static_cast<int>(width);
  l.font_px = static_cast<int>((l.tile_h + l.tile_w) * l.grid * 0.01);
  l.line = std::max(1, static_cast<int>(std::lround(l.font_px / 10.0)));
  return l;
}

cv::Rect BatchMosaicLayout::tile(int i) const {
  return {(i / grid) * tile_w, (i % grid) * tile_h, tile_w, tile_h};  // down each column first
}

namespace {

// plot_batch's mosaic; `after_tile` (optional) draws over each tile once its boxes are drawn.
using TileHook = std::function<void(cv::Mat& mosaic, int image, const cv::Rect& cell)>;
void render_batch(const Tensor& images_in, const std::vector<std::string>& files, const std::vector<PlotBox>& boxes,
                  const std::vector<std::string>& names, const std::string& path, float conf_min,
                  const TileHook& after_tile) {
  KESTREL_CHECK(images_in.dim() == 4 && images_in.size(3) == 3 && images_in.dtype() == DType::U8,
                "plot_batch needs u8 NHWC RGB images, got ", images_in.describe());
  Tensor images = images_in.to(Device::cpu()).contiguous();
  const int64_t h = images.size(1), w = images.size(2);
  const BatchMosaicLayout l = batch_mosaic_layout(images.size(0), h, w);
  // Hershey's cap height is about 22 px at scale 1; PIL's font of font_px pixels has capitals
  // about 0.7 x font_px high.
  const double font = std::max(0.3, 0.7 * l.font_px / 22.0);
  cv::Mat mosaic(l.grid * l.tile_h, l.grid * l.tile_w, CV_8UC3, kWhite);
  for (int i = 0; i < l.count; ++i) {
    cv::Mat rgb(static_cast<int>(h), static_cast<int>(w), CV_8UC3, images.data<uint8_t>() + i * h * w * 3);
    cv::Mat bgr, tile;
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
    cv::resize(bgr, tile, {l.tile_w, l.tile_h}, 0, 0, cv::INTER_AREA);
    const cv::Rect cell = l.tile(i);
    tile.copyTo(mosaic(cell));
  }
  for (int i = 0; i < l.count; ++i) {
    const cv::Rect cell = l.tile(i);
    cv::rectangle(mosaic, cell, kWhite, 2);
    // The file's name (its first 40 characters) in the tile's top-left corner, light grey.
    if (i < static_cast<int>(files.size())) {
      const std::string name = std::filesystem::path(files[i]).filename().string().substr(0, 40);
      put_text(mosaic, name, {cell.x + 5, cell.y + 5}, font, Align::kStart, Align::kStart, kCaption);
    }
    for (const PlotBox& b : boxes) {
      if (b.image != i || (b.conf >= 0 && b.conf <= conf_min)) continue;
      const cv::Point p1(cell.x + static_cast<int>(b.x1 * l.scale), cell.y + static_cast<int>(b.y1 * l.scale));
      const cv::Point p2(cell.x + static_cast<int>(b.x2 * l.scale), cell.y + static_cast<int>(b.y2 * l.scale));
      cv::rectangle(mosaic, p1, p2, class_colour(b.cls), l.line);
      std::string text = b.cls >= 0 && b.cls < static_cast<int>(names.size()) ? names[b.cls] : std::to_string(b.cls);
      if (b.conf >= 0) {
        char conf[16];
        std::snprintf(conf, sizeof conf, " %.1f", b.conf);
        text += conf;
      }
      draw_label(mosaic, text, p1, class_colour(b.cls), font);
    }
    if (after_tile) after_tile(mosaic, i, cell);
  }
  save_plot(path, mosaic);
}

}  // namespace

void plot_batch(const Tensor& images, const std::vector<std::string>& files, const std::vector<PlotBox>& boxes,
                const std::vector<std::string>& names, const std::string& path, float conf_min) {
  render_batch(images, files, boxes, names, path, conf_min, nullptr);
}

Tensor mask_plane(const Tensor& mask, float value) {
  const Tensor m = mask.to(Device::cpu()).to(DType::F32).contiguous();
  KESTREL_CHECK(m.dim() >= 2, "mask_plane needs a (..., h, w) mask, got ", m.describe());
  const int64_t h = m.size(m.dim() - 2), w = m.size(m.dim() - 1);
  KESTREL_CHECK(m.numel() == h * w, "mask_plane needs one plane, got ", m.describe());
  Tensor out = Tensor::empty({h, w}, DType::U8);
  const float* in = m.data<float>();
  uint8_t* o = out.data<uint8_t>();
  for (int64_t k = 0; k < h * w; ++k) o[k] = in[k] == value ? 1 : 0;
  return out;
}

void plot_batch_with_masks(const Tensor& images, const std::vector<std::string>& files,
                           const std::vector<PlotBox>& boxes, const std::vector<PlotMask>& masks,
                           const std::vector<std::string>& names, const std::string& path, float conf_min) {
  render_batch(images, files, boxes, names, path, conf_min, [&](cv::Mat& mosaic, int image, const cv::Rect& cell) {
    for (const PlotMask& pm : masks) {
      if (pm.image != image || (pm.conf >= 0 && pm.conf <= conf_min)) continue;
      cv::Mat plane(static_cast<int>(pm.plane.size(0)), static_cast<int>(pm.plane.size(1)), CV_8U,
                    const_cast<uint8_t*>(pm.plane.data<uint8_t>()));
      cv::Mat on = plane;
      if (plane.rows != cell.height || plane.cols != cell.width) cv::resize(plane, on, cell.size());
      const cv::Scalar colour = class_colour(pm.cls);
      cv::Mat tile = mosaic(cell);
      for (int y = 0; y < tile.rows; ++y) {
        const uint8_t* keep = on.ptr<uint8_t>(y);
        cv::Vec3b* px = tile.ptr<cv::Vec3b>(y);
        for (int x = 0; x < tile.cols; ++x) {
          if (!keep[x]) continue;
          // uint8 * 0.4 + colour * 0.6 in double, stored back truncated, as numpy's assignment.
          for (int c = 0; c < 3; ++c) px[x][c] = static_cast<uint8_t>(px[x][c] * 0.4 + colour[c] * 0.6);
        }
      }
    }
  });
}

}  // namespace kestrel::yolo
