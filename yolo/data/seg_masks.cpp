#include "yolo/data/seg_masks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <opencv2/imgproc.hpp>

#include "base/error.h"
#include "yolo/data/numpy_argsort.h"

namespace kestrel::yolo::data {
namespace {

// astype(np.int32) truncates toward zero; coordinates far outside any image (or not finite) are
// held at +-2^20 so the cast is defined and fillPoly's fixed-point edges cannot overflow.
int to_pixel(double v) {
  constexpr double kLimit = 1 << 20;
  if (!(v > -kLimit)) return -static_cast<int>(kLimit);
  if (!(v < kLimit)) return static_cast<int>(kLimit);
  return static_cast<int>(v);
}

}  // namespace

cv::Mat polygon_to_mask(int height, int width, const PixelSegment& polygon, int color,
                        int downsample_ratio) {
  KESTREL_CHECK(height > 0 && width > 0, "polygon_to_mask: image size must be positive, got ",
                width, "x", height);
  KESTREL_CHECK(downsample_ratio >= 1, "polygon_to_mask: downsample ratio must be >= 1, got ",
                downsample_ratio);
  const int nh = height / downsample_ratio, nw = width / downsample_ratio;
  KESTREL_CHECK(nh > 0 && nw > 0, "polygon_to_mask: ", width, "x", height, " downsampled by ",
                downsample_ratio, " is empty");
  cv::Mat mask = cv::Mat::zeros(height, width, CV_8U);
  if (!polygon.empty()) {
    std::vector<std::vector<cv::Point>> contour(1);
    contour[0].reserve(polygon.size());
    for (const cv::Point2d& p : polygon) contour[0].emplace_back(to_pixel(p.x), to_pixel(p.y));
    cv::fillPoly(mask, contour, cv::Scalar(color));
  }
  cv::Mat out;
  cv::resize(mask, out, cv::Size(nw, nh), 0, 0, cv::INTER_LINEAR);
  return out;
}

std::vector<cv::Mat> polygons_to_masks(int height, int width,
                                       const std::vector<PixelSegment>& polygons, int color,
                                       int downsample_ratio) {
  std::vector<cv::Mat> masks;
  masks.reserve(polygons.size());
  for (const PixelSegment& p : polygons)
    masks.push_back(polygon_to_mask(height, width, p, color, downsample_ratio));
  return masks;
}

OverlapMasks polygons_to_masks_overlap(int height, int width,
                                       const std::vector<PixelSegment>& polygons,
                                       int downsample_ratio) {
  KESTREL_CHECK(downsample_ratio >= 1,
                "polygons_to_masks_overlap: downsample ratio must be >= 1, got ", downsample_ratio);
  const int n = static_cast<int>(polygons.size());
  const bool wide = n > 255;
  OverlapMasks out;
  out.mask =
      cv::Mat::zeros(height / downsample_ratio, width / downsample_ratio, wide ? CV_32S : CV_8U);
  std::vector<cv::Mat> masks = polygons_to_masks(height, width, polygons, 1, downsample_ratio);
  // The reference sorts -areas on uint64 sums, which wraps: an area of 0 stays 0 and sorts first,
  // the others in decreasing area. These keys order the same way, ties included.
  std::vector<double> keys(masks.size());
  for (size_t i = 0; i < masks.size(); ++i) {
    const double area = cv::sum(masks[i])[0];
    keys[i] = area == 0 ? -std::numeric_limits<double>::infinity() : -area;
  }
  out.order = numpy_argsort(keys);
  for (int k = 0; k < n; ++k) {
    const cv::Mat& m = masks[out.order[k]];
    const int value = k + 1;
    for (int y = 0; y < out.mask.rows; ++y) {
      const uint8_t* src = m.ptr<uint8_t>(y);
      if (wide) {
        int32_t* dst = out.mask.ptr<int32_t>(y);
        for (int x = 0; x < out.mask.cols; ++x)
          dst[x] = std::clamp(dst[x] + src[x] * value, 0, value);
      } else {
        uint8_t* dst = out.mask.ptr<uint8_t>(y);
        for (int x = 0; x < out.mask.cols; ++x) {
          const int sum = (dst[x] + src[x] * value) & 0xFF;  // uint8 + uint8 wraps in numpy
          dst[x] = static_cast<uint8_t>(std::min(sum, value));
        }
      }
    }
  }
  return out;
}

}  // namespace kestrel::yolo::data
