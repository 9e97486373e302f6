// Colour and mixing augmentations (HSV gains, mixup's Beta ratio and blend) and the flips.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <opencv2/imgproc.hpp>

#include "base/error.h"
#include "yolo/data/augment.h"
#include "yolo/data/hsv_rgb.h"

namespace kestrel::yolo::data {

namespace {

// The image in place to OpenCV's 8-bit HSV, each channel through its table (cv::LUT with a
// 3-channel table does the same, more slowly).
void to_gained_hsv(cv::Mat& image, const std::array<double, 3>& r) {
  KESTREL_CHECK(image.type() == CV_8UC3, "HSV augmentation: needs an 8-bit BGR image");
  const std::array<std::array<uint8_t, 256>, 3> t = hsv_gain_tables(r);
  cv::cvtColor(image, image, cv::COLOR_BGR2HSV);
  for (int y = 0; y < image.rows; ++y) {
    uchar* p = image.ptr<uchar>(y);
    for (int x = 0; x < image.cols; ++x, p += 3) p[0] = t[0][p[0]], p[1] = t[1][p[1]], p[2] = t[2][p[2]];
  }
}

}  // namespace

void apply_hsv_gains(cv::Mat& bgr, const std::array<double, 3>& r) {
  cv::Mat hsv = bgr.clone();  // bgr may share its pixels (cv::Mat counts references)
  to_gained_hsv(hsv, r);
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
}

std::optional<std::array<double, 3>> draw_hsv_gains(Generator& gen, double hgain, double sgain,
                                                    double vgain) {
  if (hgain == 0 && sgain == 0 && vgain == 0) return std::nullopt;
  std::array<double, 3> r{};
  const double gains[3] = {hgain, sgain, vgain};
  for (int i = 0; i < 3; ++i) r[i] = gen.uniform(-1.0, 1.0) * gains[i] + 1.0;
  return r;
}

void augment_hsv(cv::Mat& bgr, double hgain, double sgain, double vgain, Generator& gen) {
  if (const auto r = draw_hsv_gains(gen, hgain, sgain, vgain)) apply_hsv_gains(bgr, *r);
}

void to_rgb_with_hsv_gains(cv::Mat& image, const std::optional<std::array<double, 3>>& r) {
  if (r) {
    if (fused_hsv_gains_to_rgb(image, *r)) return;  // the same bits in one pass
    to_gained_hsv(image, *r);
    cv::cvtColor(image, image, cv::COLOR_HSV2RGB);
  } else {
    cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  }
}

namespace {

double standard_normal(Generator& gen) {
  // Box-Muller; 1 - uniform() lies in (0, 1], so the logarithm is finite.
  const double u1 = 1.0 - gen.uniform(), u2 = gen.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Marsaglia and Tsang's method for Gamma(a, 1), a >= 1 (mixup uses a = 32); a < 1 through
// Gamma(a + 1) * U^(1/a).
double sample_gamma(Generator& gen, double a) {
  if (a < 1.0) return sample_gamma(gen, a + 1.0) * std::pow(1.0 - gen.uniform(), 1.0 / a);
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = standard_normal(gen);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - gen.uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

}  // namespace

double sample_beta(Generator& gen, double a, double b) {
  KESTREL_CHECK(a > 0 && b > 0, "sample_beta: parameters must be positive, got ", a, ", ", b);
  const double x = sample_gamma(gen, a), y = sample_gamma(gen, b);
  return x / (x + y);
}

cv::Mat blend(const cv::Mat& image, const cv::Mat& other, double r) {
  KESTREL_CHECK(image.type() == CV_8UC3 && other.type() == CV_8UC3 && image.size() == other.size(),
                "mixup: images must be 8-bit BGR of one size, got ", image.cols, "x", image.rows,
                " and ", other.cols, "x", other.rows);
  cv::Mat out(image.size(), CV_8UC3);
  const int row_bytes = image.cols * 3;
  for (int y = 0; y < image.rows; ++y) {
    const uchar* a = image.ptr<uchar>(y);
    const uchar* b = other.ptr<uchar>(y);
    uchar* o = out.ptr<uchar>(y);
    for (int i = 0; i < row_bytes; ++i) o[i] = static_cast<uchar>(a[i] * r + b[i] * (1.0 - r));
  }
  return out;
}

void flip_lr(cv::Mat& image, std::vector<LabelBox>& labels) {
  cv::Mat flipped;
  cv::flip(image, flipped, 1);
  image = flipped;
  for (LabelBox& b : labels) b.x = 1.0f - b.x;
}

void flip_ud(cv::Mat& image, std::vector<LabelBox>& labels) {
  cv::Mat flipped;
  cv::flip(image, flipped, 0);
  image = flipped;
  for (LabelBox& b : labels) b.y = 1.0f - b.y;
}

}  // namespace kestrel::yolo::data
