#include "yolo/data/classify_transforms.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "base/error.h"

namespace kestrel::yolo::data {
namespace {

// Python's round(): to the nearest integer, halves to even (the default rounding mode).
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

void check_image(const cv::Mat& image, int size, const char* what) {
  KESTREL_CHECK(image.type() == CV_8UC3 && !image.empty(), what, ": needs an 8-bit 3-channel image, got type ",
                image.type(), " of ", image.cols, "x", image.rows);
  KESTREL_CHECK(size > 0, what, ": size must be positive, got ", size);
}

cv::Mat resized(const cv::Mat& image, int size) {
  if (image.rows == size && image.cols == size) return image.clone();
  cv::Mat out;
  cv::resize(image, out, cv::Size(size, size), 0, 0, cv::INTER_LINEAR);
  return out;
}

// A LUT from v -> trunc(clip(v * factor + offset, 0, 255)), numpy's float64 then astype(uint8).
void apply_linear_lut(cv::Mat& image, double factor, double offset) {
  cv::Mat lut(1, 256, CV_8U);
  for (int v = 0; v < 256; ++v)
    lut.at<uint8_t>(v) = static_cast<uint8_t>(std::clamp(v * factor + offset, 0.0, 255.0));
  cv::LUT(image, lut, image);
}

void adjust_brightness(cv::Mat& rgb, double f) {
  if (f == 0) rgb.setTo(cv::Scalar::all(0));
  else if (f != 1) apply_linear_lut(rgb, f, 0.0);
}

void adjust_contrast(cv::Mat& rgb, double f) {
  if (f == 1) return;
  cv::Mat grey;
  cv::cvtColor(rgb, grey, cv::COLOR_RGB2GRAY);
  const double mean = cv::mean(grey)[0];
  if (f == 0) rgb.setTo(cv::Scalar::all(static_cast<int>(mean + 0.5)));
  else apply_linear_lut(rgb, f, mean * (1 - f));
}

void adjust_saturation(cv::Mat& rgb, double f) {
  if (f == 1) return;
  cv::Mat grey, grey_rgb;
  cv::cvtColor(rgb, grey, cv::COLOR_RGB2GRAY);
  cv::cvtColor(grey, grey_rgb, cv::COLOR_GRAY2RGB);
  if (f == 0) grey_rgb.copyTo(rgb);
  else cv::addWeighted(rgb, f, grey_rgb, 1 - f, 0.0, rgb);
}

// ToTensor + Normalize of one 8-bit value of channel c, in torchvision's float32 operations.
struct NormalizeTable {
  float value[3][256];
  NormalizeTable() {
    for (int c = 0; c < 3; ++c)
      for (int v = 0; v < 256; ++v) value[c][v] = (static_cast<float>(v) / 255.0f - kImagenetMean[c]) / kImagenetStd[c];
  }
};

}  // namespace

cv::Mat center_crop(const cv::Mat& image, int size) {
  KESTREL_CHECK(!image.empty() && image.depth() == CV_8U, "center_crop: needs a non-empty 8-bit image");
  KESTREL_CHECK(size > 0, "center_crop: size must be positive, got ", size);
  const int m = std::min(image.rows, image.cols);
  return resized(image(cv::Rect((image.cols - m) / 2, (image.rows - m) / 2, m, m)), size);
}

ResizedCrop draw_resized_crop(int height, int width, Generator& gen, std::array<double, 2> scale,
                              std::array<double, 2> ratio) {
  KESTREL_CHECK(height > 0 && width > 0, "RandomResizedCrop: empty image (", width, "x", height, ")");
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = gen.uniform(scale[0], scale[1]) * area;
    const double aspect = std::exp(gen.uniform(log_lo, log_hi));
    const int w = round_half_even(std::sqrt(target_area * aspect));
    const int h = round_half_even(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      // albumentations hands the offset over as a fraction and maps it back: the same integer.
      const int y = static_cast<int>(gen.randint(static_cast<uint64_t>(height - h) + 1));
      const int x = static_cast<int>(gen.randint(static_cast<uint64_t>(width - w) + 1));
      return {x, y, w, h, false};
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  const double lo = std::min(ratio[0], ratio[1]), hi = std::max(ratio[0], ratio[1]);
  int w = width, h = height;
  if (in_ratio < lo) h = round_half_even(w / lo);
  else if (in_ratio > hi) w = round_half_even(h * hi);
  return {(width - w) / 2, (height - h) / 2, w, h, true};
}

ColorJitterParams draw_color_jitter(Generator& gen, double strength, double p) {
  ColorJitterParams j;
  j.applied = gen.uniform() < p;
  if (!j.applied) return j;
  const double lo = std::max(0.0, 1 - strength), hi = 1 + strength;
  j.brightness = gen.uniform(lo, hi);
  j.contrast = gen.uniform(lo, hi);
  j.saturation = gen.uniform(lo, hi);
  for (int i = 3; i > 0; --i) std::swap(j.order[i], j.order[gen.randint(static_cast<uint64_t>(i) + 1)]);
  return j;
}

void apply_color_jitter(cv::Mat& rgb, const ColorJitterParams& params) {
  check_image(rgb, 1, "ColorJitter");
  if (!params.applied) return;
  for (int step : params.order) {
    if (step == 0) adjust_brightness(rgb, params.brightness);
    else if (step == 1) adjust_contrast(rgb, params.contrast);
    else if (step == 2) adjust_saturation(rgb, params.saturation);
  }
}

ClassifyAugment draw_classify_augment(int height, int width, Generator& gen) {
  ClassifyAugment a;
  a.crop = draw_resized_crop(height, width, gen);
  a.flip = gen.uniform() < 0.5;
  a.jitter = draw_color_jitter(gen);
  return a;
}

cv::Mat apply_classify_augment(const cv::Mat& bgr, int size, const ClassifyAugment& augment) {
  check_image(bgr, size, "classification augmentation");
  const ResizedCrop& c = augment.crop;
  KESTREL_CHECK(c.x >= 0 && c.y >= 0 && c.width > 0 && c.height > 0 && c.x + c.width <= bgr.cols &&
                    c.y + c.height <= bgr.rows,
                "classification augmentation: crop ", c.width, "x", c.height, " at (", c.x, ", ", c.y,
                ") outside the ", bgr.cols, "x", bgr.rows, " image");
  // The resize is per channel, so it may come before the BGR to RGB swap (on fewer pixels).
  cv::Mat rgb = resized(bgr(cv::Rect(c.x, c.y, c.width, c.height)), size);
  cv::cvtColor(rgb, rgb, cv::COLOR_BGR2RGB);
  if (augment.flip) cv::flip(rgb, rgb, 1);
  apply_color_jitter(rgb, augment.jitter);
  return rgb;
}

cv::Mat classify_augment(const cv::Mat& bgr, int size, Generator& gen) {
  check_image(bgr, size, "classification augmentation");
  return apply_classify_augment(bgr, size, draw_classify_augment(bgr.rows, bgr.cols, gen));
}

cv::Mat classify_eval(const cv::Mat& bgr, int size) {
  check_image(bgr, size, "classification centre crop");
  cv::Mat rgb = center_crop(bgr, size);
  cv::cvtColor(rgb, rgb, cv::COLOR_BGR2RGB);
  return rgb;
}

void normalize_imagenet(const cv::Mat& rgb, float* out) {
  check_image(rgb, 1, "normalize_imagenet");
  static const NormalizeTable table;
  for (int y = 0; y < rgb.rows; ++y) {
    const uint8_t* row = rgb.ptr<uint8_t>(y);
    for (int x = 0; x < rgb.cols; ++x, row += 3, out += 3) {
      out[0] = table.value[0][row[0]];
      out[1] = table.value[1][row[1]];
      out[2] = table.value[2][row[2]];
    }
  }
}

}  // namespace kestrel::yolo::data
