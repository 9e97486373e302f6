#include "yolo/data/hsv_rgb.h"

#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <random>

#include "yolo/data/augment.h"

using namespace kestrel::yolo::data;

namespace {

// OpenCV's path written out: BGR to HSV, a 3-channel cv::LUT of the gain tables, HSV to RGB.
cv::Mat opencv_path(const cv::Mat& bgr, const std::array<double, 3>& r) {
  const auto t = hsv_gain_tables(r);
  cv::Mat lut(1, 256, CV_8UC3);
  for (int x = 0; x < 256; ++x) lut.at<cv::Vec3b>(0, x) = {t[0][x], t[1][x], t[2][x]};
  cv::Mat hsv, gained, rgb;
  cv::cvtColor(bgr, hsv, cv::COLOR_BGR2HSV);
  cv::LUT(hsv, lut, gained);
  cv::cvtColor(gained, rgb, cv::COLOR_HSV2RGB);
  return rgb;
}

// Every 8-bit colour once: 4096 x 4096 pixels, B the low byte of the pixel's index.
cv::Mat all_colours() {
  cv::Mat img(4096, 4096, CV_8UC3);
  for (int y = 0; y < img.rows; ++y) {
    uint8_t* p = img.ptr<uint8_t>(y);
    for (int x = 0; x < img.cols; ++x) {
      const int i = y * img.cols + x;
      p[3 * x] = static_cast<uint8_t>(i), p[3 * x + 1] = static_cast<uint8_t>(i >> 8);
      p[3 * x + 2] = static_cast<uint8_t>(i >> 16);
    }
  }
  return img;
}

int differing_values(const cv::Mat& a, const cv::Mat& b) {
  cv::Mat d;
  cv::absdiff(a, b, d);
  return cv::countNonZero(d.reshape(1));
}

void require_fused() {
  if (!fused_hsv_available())
    GTEST_SKIP() << "this machine's cv::cvtColor(HSV2RGB) rounds neither way the fused path knows: "
                    "the loader keeps OpenCV's steps here";
}

}  // namespace

// The one-time check of this machine's OpenCV passes (x86-64 with Debian's OpenCV 4.6 here).
TEST(FusedHsv, ReproducesThisMachinesOpenCV) { EXPECT_TRUE(fused_hsv_available()); }

// All 256^3 colours, identity and extreme gains and the default hyperparameters' range.
TEST(FusedHsv, EveryColourEqualsOpenCV) {
  require_fused();
  const cv::Mat colours = all_colours();
  const std::array<double, 3> gains[] = {
      {1.0, 1.0, 1.0}, {1.015, 1.7, 1.4}, {0.985, 0.3, 0.6}, {1.9, 0.05, 1.95}};
  for (const auto& r : gains) {
    const cv::Mat expected = opencv_path(colours, r);
    for (const bool portable :
         {false, true}) {  // the AVX2 row where the CPU has it, the compiler's
      cv::Mat mine = colours.clone();
      ASSERT_TRUE(fused_hsv_gains_to_rgb(mine, r, portable));
      EXPECT_EQ(differing_values(mine, expected), 0)
          << "gains " << r[0] << " " << r[1] << " " << r[2] << (portable ? ", portable row" : "");
    }
  }
}

// Random gains as the reference draws them (uniform(-1, 1) * gain + 1, gains up to 0.9) on random
// and smooth 640 x 640 images, through the pipeline's entry point.
TEST(FusedHsv, RandomGainsEqualOpenCV) {
  require_fused();
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  cv::Mat img(640, 640, CV_8UC3);
  for (int k = 0; k < 40; ++k) {
    cv::randu(img, 0, 256);
    if (k % 2) cv::GaussianBlur(img, img, cv::Size(15, 15), 5);
    const std::array<double, 3> r = {u(rng) * 0.1 + 1, u(rng) * 0.9 + 1, u(rng) * 0.9 + 1};
    cv::Mat mine = img.clone();
    to_rgb_with_hsv_gains(mine, r);
    ASSERT_EQ(differing_values(mine, opencv_path(img, r)), 0) << "draw " << k;
  }
}

// Widths that cv::cvtColor finishes with its scalar tail are left to OpenCV: same result there.
TEST(FusedHsv, OtherWidthsFallBackToOpenCV) {
  cv::Mat img(37, 100, CV_8UC3);
  cv::randu(img, 0, 256);
  const std::array<double, 3> r = {1.01, 1.5, 0.7};
  cv::Mat untouched = img.clone();
  EXPECT_FALSE(fused_hsv_gains_to_rgb(untouched, r));
  EXPECT_EQ(differing_values(untouched, img), 0);
  cv::Mat mine = img.clone();
  to_rgb_with_hsv_gains(mine, r);
  EXPECT_EQ(differing_values(mine, opencv_path(img, r)), 0);
}

// A view into a larger image (rows with a stride) converts only the view.
TEST(FusedHsv, ConvertsAViewInPlace) {
  require_fused();
  cv::Mat big(80, 192, CV_8UC3);
  cv::randu(big, 0, 256);
  const cv::Mat before = big.clone();
  cv::Mat view = big(cv::Rect(64, 8, 128, 50));
  const std::array<double, 3> r = {0.99, 1.2, 1.3};
  ASSERT_TRUE(fused_hsv_gains_to_rgb(view, r));
  EXPECT_EQ(differing_values(view, opencv_path(before(cv::Rect(64, 8, 128, 50)), r)), 0);
  cv::Mat outside = big.clone();
  before(cv::Rect(64, 8, 128, 50)).copyTo(outside(cv::Rect(64, 8, 128, 50)));
  EXPECT_EQ(differing_values(outside, before), 0);
}
