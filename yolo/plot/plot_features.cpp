#include "yolo/plot/plot_features.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "io/atomic_file.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"

namespace kestrel::yolo {
namespace {

constexpr int kMaxMaps = 32, kColumns = 8;
constexpr int kTileWidth = 236, kGap = 6;  // 8 tiles a row: the reference's 1920-pixel-wide figure

// One channel map as a viridis tile of the given size (nearest neighbour, as imshow's pixels).
cv::Mat channel_tile(const std::vector<float>& hwc, int64_t h, int64_t w, int64_t c, int64_t ch, int tile_h) {
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t p = 0; p < h * w; ++p) {
    const float v = hwc[p * c + ch];
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  cv::Mat small(static_cast<int>(h), static_cast<int>(w), CV_8UC3);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const float v = hwc[(y * w + x) * c + ch];
      const double t = hi > lo ? (v - lo) / (hi - lo) : 0.0;
      const cv::Scalar colour = viridis(t);
      small.at<cv::Vec3b>(static_cast<int>(y), static_cast<int>(x)) =
          cv::Vec3b(static_cast<uint8_t>(colour[0]), static_cast<uint8_t>(colour[1]), static_cast<uint8_t>(colour[2]));
    }
  cv::Mat tile;
  cv::resize(small, tile, cv::Size(kTileWidth, tile_h), 0, 0, cv::INTER_NEAREST);
  return tile;
}

}  // namespace

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  std::string dims;  // Python's tuple: (3,) for one dimension, (3, 4, 5) for more
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6), version (2), length (2), header padded with spaces to a multiple of 64, then '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  write_file_atomic(path, bytes);
}

std::string save_feature_maps(const Tensor& x, const std::string& module_type, int stage, const std::string& dir) {
  KESTREL_CHECK(x.dim() == 4, "save_feature_maps: expects NHWC activations, got ", x.describe());
  const int64_t h = x.size(1), w = x.size(2), c = x.size(3);
  if (h <= 1 || w <= 1) return "";
  const std::string type = module_type.substr(module_type.rfind('.') + 1);
  const std::string stem = (std::filesystem::path(dir) / ("stage" + std::to_string(stage) + "_" + type + "_features")).string();
  const std::vector<float> hwc = x.slice(0, 0, 1).to(Device::cpu()).to(DType::F32).contiguous().to_vector<float>();

  const int n = static_cast<int>(std::min<int64_t>(kMaxMaps, c));
  const int rows = (n + kColumns - 1) / kColumns;
  const int tile_h = std::max(1, static_cast<int>(std::lround(kTileWidth * static_cast<double>(h) / w)));
  cv::Mat canvas(rows * tile_h + (rows + 1) * kGap, kColumns * kTileWidth + (kColumns + 1) * kGap, CV_8UC3,
                 cv::Scalar(255, 255, 255));
  for (int i = 0; i < n; ++i) {
    const cv::Rect cell(kGap + (i % kColumns) * (kTileWidth + kGap), kGap + (i / kColumns) * (tile_h + kGap), kTileWidth,
                        tile_h);
    channel_tile(hwc, h, w, c, i, tile_h).copyTo(canvas(cell));
  }
  std::printf("Saving %s.png... (%d/%lld)\n", stem.c_str(), n, static_cast<long long>(c));
  save_plot(stem + ".png", canvas);

  std::vector<float> chw(hwc.size());  // the reference saves x[0] as it is: (C, H, W)
  for (int64_t p = 0; p < h * w; ++p)
    for (int64_t ch = 0; ch < c; ++ch) chw[ch * h * w + p] = hwc[p * c + ch];
  write_npy(stem + ".npy", {c, h, w}, chw);
  return stem + ".png";
}

}  // namespace kestrel::yolo
