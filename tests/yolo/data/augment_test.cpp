#include "yolo/data/augment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <opencv2/imgproc.hpp>
#include <random>

#include "yolo/eval/box_ops.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

cv::Mat solid(int h, int w, uchar b, uchar g, uchar r) {
  return cv::Mat(h, w, CV_8UC3, cv::Scalar(b, g, r));
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

// tol: 1e-9 for boxes given in double; 1e-5 where they come from float labels.
void expect_box(const PixelBox& b, int cls, double x1, double y1, double x2, double y2,
                double tol = 1e-9) {
  EXPECT_EQ(b.cls, cls);
  EXPECT_NEAR(b.x1, x1, tol);
  EXPECT_NEAR(b.y1, y1, tol);
  EXPECT_NEAR(b.x2, x2, tol);
  EXPECT_NEAR(b.y2, y2, tol);
}

TEST(BoxConversion, PixelsAndBackWithTheReferenceClip) {
  const std::vector<LabelBox> in = {{3, 0.5f, 0.25f, 0.5f, 0.5f}};
  const auto px = to_pixel_boxes(in, 40, 20, 1, 2);
  ASSERT_EQ(px.size(), 1u);
  expect_box(px[0], 3, 11, 2, 31, 12);
  // A box beyond the right edge is clipped to w - eps before normalising.
  const auto n = to_normalised_boxes({{1, -5, 5, 45, 15}}, 40, 20, 1e-3);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].cls, 1);
  EXPECT_NEAR(n[0].x, (40 - 1e-3) / 2 / 40, 1e-6);
  EXPECT_NEAR(n[0].y, 0.5, 1e-6);
  EXPECT_NEAR(n[0].w, (40 - 1e-3) / 40, 1e-6);
  EXPECT_NEAR(n[0].h, 0.5, 1e-6);
}

// s = 10, centre (xc, yc) = (7, 12). By hand (the reference's placement rules):
//   tile 0 (10 wide, 6 high):  canvas [0,7)x[6,12)   from tile x [3,10), y [0,6): shift (-3, 6)
//   tile 1 (5 wide, 10 high):  canvas [7,12)x[2,12)  from x [0,5), y [0,10):     shift (7, 2)
//   tile 2 (8 wide, 8 high):   canvas [0,7)x[12,20)  from x [1,8), y [0,8):      shift (-1, 12)
//   tile 3 (10 wide, 10 high): canvas [7,17)x[12,20) from x [0,10), y [0,8):     shift (7, 12)
TEST(Mosaic, PlacementAndLabelsMatchHandComputedCase) {
  const std::array<cv::Mat, 4> tiles = {solid(6, 10, 10, 0, 0), solid(10, 5, 20, 0, 0),
                                        solid(8, 8, 30, 0, 0), solid(10, 10, 40, 0, 0)};
  // Tile 0's left three columns are marked: they must be cut off.
  tiles[0](cv::Rect(0, 0, 3, 6)).setTo(cv::Scalar(99, 0, 0));
  const std::array<std::vector<LabelBox>, 4> labels = {
      std::vector<LabelBox>{{0, 0.5f, 0.5f, 0.4f, 0.5f}}, std::vector<LabelBox>{},
      std::vector<LabelBox>{{2, 0.25f, 0.5f, 0.5f, 0.5f}},
      std::vector<LabelBox>{{3, 0.8f, 0.8f, 0.4f, 0.4f}}};
  const Mosaic m = place_mosaic(tiles, labels, 10, 7, 12);
  cv::Mat expected = solid(20, 20, 114, 114, 114);
  expected(cv::Rect(0, 6, 7, 6)).setTo(cv::Scalar(10, 0, 0));
  expected(cv::Rect(7, 2, 5, 10)).setTo(cv::Scalar(20, 0, 0));
  expected(cv::Rect(0, 12, 7, 8)).setTo(cv::Scalar(30, 0, 0));
  expected(cv::Rect(7, 12, 10, 8)).setTo(cv::Scalar(40, 0, 0));
  EXPECT_TRUE(same_pixels(m.image, expected));
  ASSERT_EQ(m.boxes.size(), 3u);
  // tile 0: x 10*(0.5-0.2)-3 = 0 .. 10*0.7-3 = 4; y 6*0.25+6 = 7.5 .. 6*0.75+6 = 10.5
  expect_box(m.boxes[0], 0, 0, 7.5, 4, 10.5, 1e-5);
  // tile 2: x 8*0-1 = -1 -> 0 .. 8*0.5-1 = 3; y 8*0.25+12 = 14 .. 8*0.75+12 = 18
  expect_box(m.boxes[1], 2, 0, 14, 3, 18, 1e-5);
  // tile 3: x 10*0.6+7 = 13 .. 17; y 6+12 = 18 .. 10+12 = 22 -> clipped to 2s = 20
  expect_box(m.boxes[2], 3, 13, 18, 17, 20, 1e-5);
}

TEST(Perspective, MatrixRotationMatchesOpenCv) {
  PerspectiveParams p;
  p.degrees = 30;
  p.scale = 1.3;
  const cv::Matx33d M = perspective_matrix(p, 0, 0, 0, 0);  // no centring or translation
  const cv::Mat cv_r = cv::getRotationMatrix2D(cv::Point2f(0, 0), 30, 1.3);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(M(r, c), cv_r.at<double>(r, c), 1e-7) << r << c;
}

TEST(Perspective, ScaleAndTranslateOnlyMoveBoxesByHand) {
  const cv::Mat img = solid(20, 20, 50, 60, 70);
  PerspectiveParams p;
  p.scale = 0.5;
  p.tx = 0.6;  // x' = 0.5 (x - 10) + 0.6 * 20 = 0.5 x + 7;  y' = 0.5 (y - 10) + 10 = 0.5 y + 5
  const Warped w = random_perspective(
      img, {{1, 4, 4, 16, 12}, {2, 0, 0, 3, 3}, {3, 20, 0, 40, 10}}, p, 0);
  ASSERT_EQ(w.image.cols, 20);
  ASSERT_EQ(w.image.rows, 20);
  // Box 1 -> (9, 7, 15, 11). Box 2 -> 1.5 px wide: dropped (wh_thr = 2). Box 3 -> x 17..27,
  // clipped to 17..20: area 3 x 5 = 15 of (20 x 10) * 0.25 = 50 > 10%: kept.
  ASSERT_EQ(w.boxes.size(), 2u);
  expect_box(w.boxes[0], 1, 9, 7, 15, 11);
  expect_box(w.boxes[1], 3, 17, 5, 20, 10);
  // The image shrank around (12, 10): pixels there keep the colour, the corners are border grey.
  EXPECT_EQ(w.image.at<cv::Vec3b>(10, 12), cv::Vec3b(50, 60, 70));
  EXPECT_EQ(w.image.at<cv::Vec3b>(1, 1), cv::Vec3b(114, 114, 114));
}

TEST(Perspective, MosaicBorderCropsTheCentre) {
  cv::Mat canvas(40, 40, CV_8UC3);
  std::mt19937 rng(7);
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 120; ++x) canvas.ptr<uchar>(y)[x] = static_cast<uchar>(rng());
  const PerspectiveParams identity;  // scale 1, translate to the centre: x' = x - 10
  const Warped w = random_perspective(canvas, {{0, 15, 15, 25, 30}}, identity, -10);
  EXPECT_TRUE(same_pixels(w.image, canvas(cv::Rect(10, 10, 20, 20))));
  ASSERT_EQ(w.boxes.size(), 1u);
  expect_box(w.boxes[0], 0, 5, 5, 15, 20);
}

TEST(Perspective, RotationBy90DegreesByHand) {
  PerspectiveParams p;
  p.degrees = 90;
  // Centred: (12..18, 2..6) -> (2..8, -8..-4); x' = y, y' = -x -> x' -8..-4, y' -8..-2; + 10.
  const Warped w = random_perspective(solid(20, 20, 1, 2, 3), {{5, 12, 2, 18, 6}}, p, 0);
  ASSERT_EQ(w.boxes.size(), 1u);
  EXPECT_EQ(w.boxes[0].cls, 5);
  EXPECT_NEAR(w.boxes[0].x1, 2, 1e-9);
  EXPECT_NEAR(w.boxes[0].y1, 2, 1e-9);
  EXPECT_NEAR(w.boxes[0].x2, 6, 1e-9);
  EXPECT_NEAR(w.boxes[0].y2, 8, 1e-9);
}

TEST(Perspective, DrawsStayInTheirRanges) {
  yolo::Hyp hyp;
  hyp.degrees = 10, hyp.translate = 0.1, hyp.scale = 0.5, hyp.shear = 2, hyp.perspective = 0.001;
  Generator gen(3, 4);
  for (int i = 0; i < 200; ++i) {
    const PerspectiveParams p = draw_perspective(gen, hyp);
    EXPECT_LE(std::abs(p.px), 0.001);
    EXPECT_LE(std::abs(p.degrees), 10.0);
    EXPECT_GE(p.scale, 0.5);
    EXPECT_LT(p.scale, 1.5);
    EXPECT_LE(std::abs(p.shear_y), 2.0);
    EXPECT_GE(p.tx, 0.4);
    EXPECT_LT(p.ty, 0.6);
  }
}

TEST(BoxCandidates, EachThresholdRejects) {
  const PixelBox before{0, 0, 0, 10, 10};
  EXPECT_TRUE(box_candidate(before, {0, 0, 0, 5, 5}));
  EXPECT_FALSE(box_candidate(before, {0, 0, 0, 2, 5}));  // 2 px wide: not > wh_thr
  EXPECT_FALSE(box_candidate(before, {0, 0, 0, 5, 2}));
  EXPECT_FALSE(box_candidate(before, {0, 0, 0, 3, 3}));  // 9% of the area
  EXPECT_TRUE(box_candidate(before, {0, 0, 0, 4, 3}));   // 12%
  const PixelBox long_before{0, 0, 0, 1000, 50};  // 20% of the area kept below
  EXPECT_FALSE(box_candidate(long_before, {0, 0, 0, 1000, 9.9}));  // aspect 101
  EXPECT_TRUE(box_candidate(long_before, {0, 0, 0, 1000, 10.1}));
}

TEST(Hsv, ZeroGainsAreTheIdentityAndDrawNothing) {
  cv::Mat img(9, 13, CV_8UC3);
  cv::randu(img, 0, 256);
  const cv::Mat before = img.clone();
  Generator gen(1, 2);
  augment_hsv(img, 0, 0, 0, gen);
  EXPECT_TRUE(same_pixels(img, before));
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Hsv, GainsByHand) {
  // Grey has no hue or saturation: only the value gain acts. 100 * 1.2 = 120; 250 * 1.2 -> 255.
  cv::Mat grey = solid(2, 2, 100, 100, 100);
  apply_hsv_gains(grey, {1.7, 1.3, 1.2});
  EXPECT_TRUE(same_pixels(grey, solid(2, 2, 120, 120, 120)));
  cv::Mat bright = solid(2, 2, 250, 250, 250);
  apply_hsv_gains(bright, {1.0, 1.0, 1.2});
  EXPECT_TRUE(same_pixels(bright, solid(2, 2, 255, 255, 255)));
  // Pure blue is hue 120 (of 180). x 0.5 -> 60: green. x 1.75 -> 210 mod 180 = 30: yellow.
  cv::Mat blue = solid(2, 2, 255, 0, 0);
  apply_hsv_gains(blue, {0.5, 1.0, 1.0});
  EXPECT_TRUE(same_pixels(blue, solid(2, 2, 0, 255, 0)));
  cv::Mat blue2 = solid(2, 2, 255, 0, 0);
  apply_hsv_gains(blue2, {1.75, 1.0, 1.0});
  EXPECT_TRUE(same_pixels(blue2, solid(2, 2, 0, 255, 255)));
  // Saturation 0 turns any colour grey at its value (max channel).
  cv::Mat red = solid(2, 2, 0, 0, 200);
  apply_hsv_gains(red, {1.0, 0.0, 1.0});
  EXPECT_TRUE(same_pixels(red, solid(2, 2, 200, 200, 200)));
}

TEST(Mixup, BetaMomentsAndTruncatingBlend) {
  Generator gen(11, 0);
  const int n = 20000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double r = sample_beta(gen, 32, 32);
    ASSERT_GT(r, 0);
    ASSERT_LT(r, 1);
    sum += r;
    sum_sq += r * r;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  // Beta(32, 32): mean 1/2, variance 1 / (4 * 65) = 0.003846; the sample mean's sd is 4.4e-4.
  EXPECT_NEAR(mean, 0.5, 0.002);
  EXPECT_NEAR(var, 1.0 / 260.0, 0.0004);
  // 100 * 0.5 + 201 * 0.5 = 150.5 -> 150 (truncated, as astype(uint8)).
  const cv::Mat out = blend(solid(1, 2, 100, 0, 255), solid(1, 2, 201, 0, 255), 0.5);
  EXPECT_EQ(out.at<cv::Vec3b>(0, 1), cv::Vec3b(150, 0, 255));
}

TEST(Flips, PixelsAndLabelsMirror) {
  cv::Mat img = solid(2, 3, 0, 0, 0);
  img.at<cv::Vec3b>(0, 0) = {1, 2, 3};
  std::vector<LabelBox> labels = {{0, 0.25f, 0.125f, 0.1f, 0.2f}};
  flip_lr(img, labels);
  EXPECT_EQ(img.at<cv::Vec3b>(0, 2), cv::Vec3b(1, 2, 3));
  EXPECT_FLOAT_EQ(labels[0].x, 0.75f);
  flip_ud(img, labels);
  EXPECT_EQ(img.at<cv::Vec3b>(1, 2), cv::Vec3b(1, 2, 3));
  EXPECT_FLOAT_EQ(labels[0].y, 0.875f);
  EXPECT_FLOAT_EQ(labels[0].w, 0.1f);
}

TEST(Letterbox, RatioPadAndBorders) {
  // 100 x 50 into 64 x 64: r = 0.64, 64 x 32 inside, dh = 32 -> 16 each side.
  const Letterboxed a = letterbox(solid(50, 100, 9, 9, 9), 64, 64, false, true);
  EXPECT_EQ(a.image.cols, 64);
  EXPECT_EQ(a.image.rows, 64);
  EXPECT_DOUBLE_EQ(a.ratio_w, 0.64);
  EXPECT_DOUBLE_EQ(a.pad_w, 0);
  EXPECT_DOUBLE_EQ(a.pad_h, 16);
  EXPECT_EQ(a.image.at<cv::Vec3b>(15, 5), cv::Vec3b(114, 114, 114));
  EXPECT_EQ(a.image.at<cv::Vec3b>(16, 5), cv::Vec3b(9, 9, 9));
  EXPECT_EQ(a.image.at<cv::Vec3b>(47, 5), cv::Vec3b(9, 9, 9));
  EXPECT_EQ(a.image.at<cv::Vec3b>(48, 5), cv::Vec3b(114, 114, 114));
  // 100 x 45: 64 x round(28.8) = 29, dh = 35 -> 17.5: 17 on top, 18 below.
  const Letterboxed b = letterbox(solid(45, 100, 9, 9, 9), 64, 64, false, true);
  EXPECT_DOUBLE_EQ(b.pad_h, 17.5);
  EXPECT_EQ(b.image.rows, 64);
  EXPECT_EQ(b.image.at<cv::Vec3b>(16, 0), cv::Vec3b(114, 114, 114));
  EXPECT_EQ(b.image.at<cv::Vec3b>(17, 0), cv::Vec3b(9, 9, 9));
  EXPECT_EQ(b.image.at<cv::Vec3b>(45, 0), cv::Vec3b(9, 9, 9));
  EXPECT_EQ(b.image.at<cv::Vec3b>(46, 0), cv::Vec3b(114, 114, 114));
  // No scale-up: a 20 x 10 image stays, padded 22 / 27 per side.
  const Letterboxed c = letterbox(solid(10, 20, 9, 9, 9), 64, 64, false, false);
  EXPECT_DOUBLE_EQ(c.ratio_h, 1.0);
  EXPECT_DOUBLE_EQ(c.pad_w, 22);
  EXPECT_DOUBLE_EQ(c.pad_h, 27);
  // Minimum rectangle: padding only to a multiple of the stride.
  const Letterboxed d = letterbox(solid(50, 100, 9, 9, 9), 64, 64, true, true, 32);
  EXPECT_EQ(d.image.rows, 32);
  EXPECT_EQ(d.image.cols, 64);
}

// The letterbox's ratio and padding are what evaluation's scale_boxes (yolo/eval/box_ops.h) undoes.
TEST(Letterbox, BoxesScaleBackToTheOriginal) {
  const Letterboxed lb = letterbox(solid(45, 100, 9, 9, 9), 64, 64, false, true);
  auto fwd_x = [&](double x) { return static_cast<float>(x * lb.ratio_w + lb.pad_w); };
  auto fwd_y = [&](double y) { return static_cast<float>(y * lb.ratio_h + lb.pad_h); };
  kestrel::Tensor boxes = kestrel::Tensor::from_vector<float>(
      {fwd_x(10), fwd_y(5), fwd_x(50), fwd_y(25), -3, 0, 70, 70}, {2, 4});
  kestrel::yolo::scale_boxes(boxes, {lb.image.rows, lb.image.cols}, {45, 100},
                             kestrel::yolo::RatioPad{lb.ratio_w, lb.pad_w, lb.pad_h});
  const std::vector<float> v = boxes.to_vector<float>();
  const float expect[8] = {10, 5, 50, 25, 0, 0, 100, 45};  // the second clipped to the image
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(v[i], expect[i], 1e-4) << i;
}

}  // namespace
