// The classification transforms: the centre crop against a hand-made crop and cv::resize, the
// normalisation's values and layout, RandomResizedCrop's parameter ranges and fallback, the
// flip's and the jitter's rates, ColorJitter's uint8 formulas on hand-computed pixels, and the
// augmentation's size and determinism.
#include "yolo/data/classify_transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <opencv2/imgproc.hpp>
#include <random>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

cv::Mat random_image(int h, int w, uint32_t seed) {
  cv::Mat m(h, w, CV_8UC3);
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w * 3; ++x) m.ptr<uint8_t>(y)[x] = static_cast<uint8_t>(rng());
  return m;
}

bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

TEST(ClassifyTransforms, CenterCropIsTheCentredSquareResized) {
  // (h - m) // 2 and (w - m) // 2 with odd differences: the extra row or column is left at the end.
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{37, 90}, {101, 40}, {64, 64}, {300, 301}}) {
    const cv::Mat image = random_image(h, w, static_cast<uint32_t>(h * 1000 + w));
    const int m = std::min(h, w);
    cv::Mat expected;
    cv::resize(image(cv::Rect((w - m) / 2, (h - m) / 2, m, m)).clone(), expected, cv::Size(48, 48), 0, 0,
               cv::INTER_LINEAR);
    EXPECT_TRUE(same(center_crop(image, 48), expected)) << w << "x" << h;
  }
  // Already size x size: the pixels themselves.
  const cv::Mat square = random_image(32, 32, 7);
  EXPECT_TRUE(same(center_crop(square, 32), square));
  // The evaluation transform is that crop in RGB.
  const cv::Mat image = random_image(50, 70, 3);
  cv::Mat rgb;
  cv::cvtColor(center_crop(image, 24), rgb, cv::COLOR_BGR2RGB);
  EXPECT_TRUE(same(classify_eval(image, 24), rgb));
}

TEST(ClassifyTransforms, NormalisationValuesAndLayout) {
  // One pixel per (R, G, B) triple; out is HWC.
  cv::Mat rgb(1, 3, CV_8UC3);
  rgb.at<cv::Vec3b>(0, 0) = {0, 0, 0};
  rgb.at<cv::Vec3b>(0, 1) = {255, 255, 255};
  rgb.at<cv::Vec3b>(0, 2) = {10, 128, 200};
  float out[9];
  normalize_imagenet(rgb, out);
  const double mean[3] = {0.485, 0.456, 0.406}, stdev[3] = {0.229, 0.224, 0.225};
  const int values[3][3] = {{0, 0, 0}, {255, 255, 255}, {10, 128, 200}};
  for (int p = 0; p < 3; ++p)
    for (int c = 0; c < 3; ++c)  // float32 arithmetic: within a few ulp of the exact value
      EXPECT_NEAR(out[p * 3 + c], (values[p][c] / 255.0 - mean[c]) / stdev[c], 2e-6) << p << "," << c;
  EXPECT_NEAR(out[0], -2.1179039, 1e-6);  // -0.485 / 0.229
  EXPECT_NEAR(out[5], 2.64, 1e-6);        // (1 - 0.406) / 0.225
}

TEST(ClassifyTransforms, ResizedCropStaysInItsRanges) {
  // A large image (rounding moves a side by at most half a pixel: 1% slack is ample).
  const int h = 800, w = 1000;
  int fallbacks = 0, wider = 0;
  for (int i = 0; i < 4000; ++i) {
    Generator gen(11, static_cast<uint64_t>(i));
    const ResizedCrop c = draw_resized_crop(h, w, gen);
    ASSERT_TRUE(c.x >= 0 && c.y >= 0 && c.x + c.width <= w && c.y + c.height <= h);
    if (c.fallback) {
      ++fallbacks;
      continue;
    }
    const double area = static_cast<double>(c.width) * c.height / (h * w);
    const double aspect = static_cast<double>(c.width) / c.height;
    EXPECT_GE(area, 0.08 * 0.99);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(aspect, 0.75 * 0.99);
    EXPECT_LE(aspect, 4.0 / 3.0 * 1.01);
    wider += aspect > 1;
  }
  // Fallback needs 10 misfits in a row: rare on a 5:4 image.
  EXPECT_LT(fallbacks, 40);
  // log-uniform aspect ratio symmetric about 1, but misfits (too wide or too tall) are dropped
  // unevenly on a wide image: wider crops fit more often.
  EXPECT_GT(wider, 1800);
  EXPECT_LT(wider, 2600);
}

// The distribution against albumentations 1.3.1's own RandomResizedCrop(224, 224): 200000 calls of
// get_params_dependent_on_targets on a 300x400 image (Python's random, seed 0) gave a mean area
// fraction of 0.43265 (sd 0.21652), a mean w/h of 1.04505 and w > h in 57.53% of crops. 20000
// draws here: the bounds are about 4 standard errors.
TEST(ClassifyTransforms, ResizedCropDistributionMatchesAlbumentations) {
  const int n = 20000;
  double area = 0, aspect = 0;
  int wider = 0;
  for (int i = 0; i < n; ++i) {
    Generator gen(21, static_cast<uint64_t>(i));
    const ResizedCrop c = draw_resized_crop(300, 400, gen);
    area += static_cast<double>(c.width) * c.height / (300.0 * 400.0);
    aspect += static_cast<double>(c.width) / c.height;
    wider += c.width > c.height;
  }
  EXPECT_NEAR(area / n, 0.43265, 0.006);
  EXPECT_NEAR(aspect / n, 1.04505, 0.005);
  EXPECT_NEAR(static_cast<double>(wider) / n, 0.5753, 0.015);
}

TEST(ClassifyTransforms, ResizedCropFallsBackToTheCentralCropOfTheNearestRatio) {
  // No attempt can fit a 20-pixel-high strip (the smallest crop is ~ sqrt(0.08 * 20000) = 40 high
  // at ratio 4/3): the central 27x20 (round(20 * 4/3)) crop.
  Generator gen(3);
  ResizedCrop c = draw_resized_crop(20, 1000, gen);
  EXPECT_TRUE(c.fallback);
  EXPECT_EQ(c.width, 27);
  EXPECT_EQ(c.height, 20);
  EXPECT_EQ(c.x, (1000 - 27) / 2);
  EXPECT_EQ(c.y, 0);
  c = draw_resized_crop(1000, 20, gen);  // a tall strip: height = round(20 / 0.75) = 27
  EXPECT_TRUE(c.fallback);
  EXPECT_EQ(c.width, 20);
  EXPECT_EQ(c.height, 27);
  EXPECT_EQ(c.y, (1000 - 27) / 2);
}

TEST(ClassifyTransforms, FlipAndJitterEachHappenHalfTheTime) {
  const int n = 8000;  // binomial(8000, 0.5): sd 45, the bounds are 5 sd away
  int flips = 0, jitters = 0;
  std::map<int, int> brightness_first;
  for (int i = 0; i < n; ++i) {
    Generator gen(5, static_cast<uint64_t>(i));
    const ClassifyAugment a = draw_classify_augment(300, 400, gen);
    flips += a.flip;
    jitters += a.jitter.applied;
    if (!a.jitter.applied) continue;
    for (double f : {a.jitter.brightness, a.jitter.contrast, a.jitter.saturation}) {
      EXPECT_GE(f, 0.6);
      EXPECT_LT(f, 1.4);
    }
    ++brightness_first[static_cast<int>(std::find(a.jitter.order.begin(), a.jitter.order.end(), 0) -
                                        a.jitter.order.begin())];
  }
  EXPECT_NEAR(flips, n / 2, 225);
  EXPECT_NEAR(jitters, n / 2, 225);
  for (int pos = 0; pos < 4; ++pos)  // the brightness step's position: uniform over the 4
    EXPECT_NEAR(brightness_first[pos], jitters / 4, 150) << pos;
}

TEST(ClassifyTransforms, JitterFormulasOnHandComputedPixels) {
  cv::Mat rgb(1, 3, CV_8UC3);
  rgb.at<cv::Vec3b>(0, 0) = {100, 250, 101};
  rgb.at<cv::Vec3b>(0, 1) = {255, 0, 0};
  rgb.at<cv::Vec3b>(0, 2) = {0, 0, 0};
  ColorJitterParams p;
  p.applied = true;
  p.brightness = 1.2;  // trunc(clip(v * 1.2)): 120, 255 (300 clipped), 121 (121.2)
  p.contrast = p.saturation = 1.0;
  cv::Mat b = rgb.clone();
  apply_color_jitter(b, p);
  EXPECT_EQ(b.at<cv::Vec3b>(0, 0), cv::Vec3b(120, 255, 121));
  EXPECT_EQ(b.at<cv::Vec3b>(0, 1), cv::Vec3b(255, 0, 0));
  // Saturation 0.6: 0.6 * v + 0.4 * grey, grey(255, 0, 0) = 76 (OpenCV's 0.299 R): 183.4 -> 183, 30.4 -> 30.
  p.brightness = 1.0;
  p.saturation = 0.6;
  cv::Mat s = rgb.clone();
  apply_color_jitter(s, p);
  EXPECT_EQ(s.at<cv::Vec3b>(0, 1), cv::Vec3b(183, 30, 30));
  EXPECT_EQ(s.at<cv::Vec3b>(0, 0), cv::Vec3b(135, 225, 136));  // albumentations 1.3.1 gives these three too
  EXPECT_EQ(s.at<cv::Vec3b>(0, 2), cv::Vec3b(0, 0, 0));
  // Contrast 1.5 about the grey mean m: trunc(clip(1.5 v - 0.5 m)).
  p.saturation = 1.0;
  p.contrast = 1.5;
  cv::Mat grey;
  cv::cvtColor(rgb, grey, cv::COLOR_RGB2GRAY);
  const double m = (grey.at<uint8_t>(0, 0) + grey.at<uint8_t>(0, 1) + grey.at<uint8_t>(0, 2)) / 3.0;
  cv::Mat c = rgb.clone();
  apply_color_jitter(c, p);
  EXPECT_EQ(c.at<cv::Vec3b>(0, 0)[0], static_cast<uint8_t>(std::clamp(150 - 0.5 * m, 0.0, 255.0)));
  EXPECT_EQ(c.at<cv::Vec3b>(0, 2)[0], 0);  // negative: clipped
  EXPECT_EQ(c.at<cv::Vec3b>(0, 0), cv::Vec3b(106, 255, 107));  // m = 88, as albumentations 1.3.1
  // Not applied (or every factor 1): the image is left alone.
  p.contrast = 1.0;
  cv::Mat unchanged = rgb.clone();
  apply_color_jitter(unchanged, p);
  EXPECT_TRUE(same(unchanged, rgb));
  ColorJitterParams off;
  off.brightness = 1.4;
  apply_color_jitter(unchanged, off);
  EXPECT_TRUE(same(unchanged, rgb));
}

TEST(ClassifyTransforms, AugmentationIsTheCropResizedThenFlippedAndJittered) {
  const cv::Mat bgr = random_image(90, 120, 9);
  ClassifyAugment a;
  a.crop = {10, 5, 60, 50, false};
  cv::Mat expected;
  cv::resize(bgr(cv::Rect(10, 5, 60, 50)), expected, cv::Size(32, 32), 0, 0, cv::INTER_LINEAR);
  cv::cvtColor(expected, expected, cv::COLOR_BGR2RGB);
  EXPECT_TRUE(same(apply_classify_augment(bgr, 32, a), expected));  // no flip, no jitter
  a.flip = true;
  cv::flip(expected, expected, 1);
  EXPECT_TRUE(same(apply_classify_augment(bgr, 32, a), expected));
  a.jitter.applied = true;
  a.jitter.brightness = 0.7;
  a.jitter.order = {3, 2, 1, 0};
  apply_color_jitter(expected, a.jitter);
  EXPECT_TRUE(same(apply_classify_augment(bgr, 32, a), expected));
}

TEST(ClassifyTransforms, AugmentationSizeAndDeterminism) {
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{480, 640}, {50, 300}, {224, 224}, {17, 13}}) {
    const cv::Mat bgr = random_image(h, w, static_cast<uint32_t>(h + w));
    Generator g1(42, 7), g2(42, 7), g3(42, 8);
    const cv::Mat a = classify_augment(bgr, 224, g1), b = classify_augment(bgr, 224, g2);
    EXPECT_EQ(a.rows, 224);
    EXPECT_EQ(a.cols, 224);
    EXPECT_EQ(a.type(), CV_8UC3);
    EXPECT_TRUE(same(a, b));
    EXPECT_FALSE(same(a, classify_augment(bgr, 224, g3)));
  }
  Generator gen(1);
  const std::string e = kestrel::testing::error_of([&] { classify_augment(random_image(8, 8, 1), 0, gen); });
  EXPECT_NE(e.find("size must be positive"), std::string::npos) << e;
}

}  // namespace
