// A tiny instance-segmentation dataset written into a folder for the segmentation trainer's tests:
// `images` 64 x 64 JPEGs, each with one to three filled shapes (a square of class 0, a triangle
// of class 1) on a grey background, their polygon labels (class x1 y1 x2 y2 ..., normalised) and
// data.yaml naming both classes, train and val the same folder. Deterministic (a fixed LCG).
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "yolo/data/image_codec.h"

namespace kestrel::testing {

inline std::filesystem::path write_seg_dataset(const std::filesystem::path& root, int images = 8) {
  namespace fs = std::filesystem;
  fs::create_directories(root / "images");
  fs::create_directories(root / "labels");
  uint64_t state = 12345;
  const auto next = [&state](int lo, int hi) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<int>((state >> 33) % static_cast<uint64_t>(hi - lo + 1));
  };
  for (int i = 0; i < images; ++i) {
    cv::Mat img(64, 64, CV_8UC3, cv::Scalar(114, 114, 114));
    std::ofstream labels(root / "labels" / ("img" + std::to_string(i) + ".txt"));
    const int shapes = 1 + i % 3;
    for (int k = 0; k < shapes; ++k) {
      const int cls = (i + k) % 2, size = next(12, 24), x = next(2, 62 - size), y = next(2, 62 - size);
      std::vector<cv::Point> poly = cls == 0 ? std::vector<cv::Point>{{x, y}, {x + size, y}, {x + size, y + size}, {x, y + size}}
                                             : std::vector<cv::Point>{{x + size / 2, y}, {x + size, y + size}, {x, y + size}};
      cv::fillPoly(img, std::vector<std::vector<cv::Point>>{poly}, cls == 0 ? cv::Scalar(40, 40, 220) : cv::Scalar(220, 60, 40));
      labels << cls;
      for (const cv::Point& p : poly) labels << ' ' << p.x / 64.0 << ' ' << p.y / 64.0;
      labels << '\n';
    }
    yolo::data::write_jpeg((root / "images" / ("img" + std::to_string(i) + ".jpg")).string(), img);
  }
  std::ofstream yaml(root / "data.yaml");
  yaml << "path: " << root.string() << "\ntrain: images\nval: images\nnames:\n  0: square\n  1: triangle\n";
  return root / "data.yaml";
}

}  // namespace kestrel::testing
