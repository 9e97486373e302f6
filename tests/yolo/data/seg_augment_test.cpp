// Segments through random_perspective and the flips. The reference numbers were printed by
// tests/scripts/seg_data_reference.py: v7.0's utils/segment/augmentations.random_perspective after
// random.seed(seed), whose draws it prints so that this test builds the same matrix.
#include "yolo/data/seg_augment.h"

#include <cmath>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

// seg_data_reference.py's POLYGONS, halved to fit 320x240.
std::vector<PixelSegment> polygons() {
  std::vector<PixelSegment> p = {
      {{10.5, 20.25}, {300.75, 40.5}, {250.0, 400.125}, {30.0, 350.0}},
      {{320.9, 100.2}, {600.3, 120.7}, {610.0, 460.5}, {450.5, 300.0}, {330.1, 470.9}},
      {{100.0, 100.0}, {200.0, 100.0}, {200.0, 180.0}, {100.0, 180.0}},
      {{-50.0, -20.0}, {90.0, 10.0}, {40.0, 60.0}},
  };
  for (auto& s : p)
    for (auto& q : s) q *= 0.5;
  return p;
}

// The reference's targets: class i and the polygon's min/max, unclipped.
std::vector<PixelBox> boxes_of(const std::vector<PixelSegment>& segs) {
  std::vector<PixelBox> boxes;
  for (size_t i = 0; i < segs.size(); ++i) {
    PixelBox b{static_cast<int>(i), INFINITY, INFINITY, -INFINITY, -INFINITY};
    for (const auto& q : segs[i]) {
      b.x1 = std::min(b.x1, q.x), b.y1 = std::min(b.y1, q.y);
      b.x2 = std::max(b.x2, q.x), b.y2 = std::max(b.y2, q.y);
    }
    boxes.push_back(b);
  }
  return boxes;
}

struct Kept {
  std::array<double, 5> row;     // class x1 y1 x2 y2
  std::array<double, 6> points;  // points 0, 500 and 999 (x, y)
};

// numpy's matmul (BLAS) may add in another order than M(0,0) x + M(0,1) y + M(0,2): a few ulps.
void expect_near(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::abs(want))) << what;
}

void check_against_reference(const std::array<double, 8>& d, bool projective,
                             const std::vector<Kept>& want) {
  const PerspectiveParams p{d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]};
  const cv::Matx33d M = perspective_matrix(p, 320, 240, 320, 240);
  const auto segs = polygons();
  const WarpedSegments w = warp_segments(boxes_of(segs), segs, M, projective, p.scale, 320, 240);
  ASSERT_EQ(w.boxes.size(), want.size());
  ASSERT_EQ(w.segments.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string at = "instance " + std::to_string(i);
    EXPECT_EQ(w.boxes[i].cls, static_cast<int>(want[i].row[0])) << at;
    expect_near(w.boxes[i].x1, want[i].row[1], at + " x1");
    expect_near(w.boxes[i].y1, want[i].row[2], at + " y1");
    expect_near(w.boxes[i].x2, want[i].row[3], at + " x2");
    expect_near(w.boxes[i].y2, want[i].row[4], at + " y2");
    ASSERT_EQ(w.segments[i].size(), 1000u);
    const int k[3] = {0, 500, 999};
    for (int j = 0; j < 3; ++j) {
      expect_near(w.segments[i][k[j]].x, want[i].points[2 * j],
                  at + " point x " + std::to_string(k[j]));
      expect_near(w.segments[i][k[j]].y, want[i].points[2 * j + 1],
                  at + " point y " + std::to_string(k[j]));
    }
  }
}

}  // namespace

TEST(WarpSegments, AffineMatchesTheReference) {
  check_against_reference(
      {0.0, 0.0, 3.0186894607970753, 0.5724362866675428, 0.1435280172267568, -0.5372443323496578,
       0.4115997849549414, 0.5014871466378841},
      false,
      {{{0, 39.792448048727806, 63.073323030705595, 123.05191857410055, 167.32322128642295},
        {39.792448048727806, 63.073323030705595, 114.10781999012184, 167.32322128642295,
         39.792448048727806, 63.073323030705595}},
       {{1, 129.76187202823567, 80.40292205163252, 218.046047085941, 186.09003214760338},
        {129.76187202823567, 80.40292205163252, 193.8918130216746, 156.5832890820346,
         129.76187202823567, 80.40292205163252}},
       {{2, 66.62919831621603, 82.49743868329256, 96.46809097727439, 107.11998920555264},
        {66.62919831621603, 84.26739398698734, 96.4134058420793, 105.35003390185787,
         66.62919831621603, 84.26739398698734}},
       {{3, 21.867066237006583, 52.64876530535532, 62.35038054505647, 73.90537974254686},
        {21.867066237006583, 52.64876530535532, 55.58024806597723, 66.34234699989557,
         21.867066237006583, 52.64876530535532}}});
}

TEST(WarpSegments, ProjectiveMatchesTheReference) {
  // Points that leave the image stay in the polygon; the box only counts the inside ones.
  check_against_reference(
      {-4.762044649018137e-05, 5.977238608049595e-05, 8.484211680474587, 0.9656500700997733,
       0.03136509224908446, 0.3495393153995878, 0.43693206877097535, 0.5023817278083611},
      true,
      {{{0, 0.12142868220712814, 26.04260722212476, 117.97881701001539, 201.35029647914553},
        {-23.54893448015673, 36.74903026793395, 117.7663497437526, 201.35029647914553,
         -23.54893448015673, 36.74903026793395}},
       {{1, 130.21254587732486, 43.65010019024207, 294.0250845550233, 229.43202435798736},
        {130.21254587732486, 53.407043506481855, 250.111221370517, 173.12142875187104,
         130.21254587732486, 53.407043506481855}},
       {{2, 24.87950084901271, 61.79648815875056, 78.28196733848688, 106.96372935937492},
        {24.87950084901271, 68.74029252525243, 78.1984991780905, 100.1271333171173,
         24.87950084901271, 68.74029252525243}},
       {{3, 0.010161305065252122, 25.344974956688834, 13.371974212541783, 44.67336038019068},
        {-55.243773740907464, 21.67951206645465, 3.361076017658685, 40.04536765003753,
         -55.243773740907464, 21.67951206645465}}});
}

TEST(WarpSegments, DropsInstancesThatLeaveTheImageOrShrink) {
  const std::vector<PixelSegment> segs = {{{10, 10}, {50, 10}, {50, 40}, {10, 40}},
                                          {{100, 100}, {140, 100}, {140, 140}, {100, 140}}};
  const auto boxes = boxes_of(segs);
  // A shift of 120 px right: the first square lands at x 130..170, the second beyond 200.
  const cv::Matx33d shift(1, 0, 120, 0, 1, 0, 0, 0, 1);
  const WarpedSegments w = warp_segments(boxes, segs, shift, false, 1.0, 200, 200);
  ASSERT_EQ(w.boxes.size(), 1u);
  EXPECT_EQ(w.boxes[0].cls, 0);
  EXPECT_DOUBLE_EQ(w.boxes[0].x1, 130);
  EXPECT_DOUBLE_EQ(w.boxes[0].x2, 170);
  EXPECT_DOUBLE_EQ(w.boxes[0].y2, 40);
  // Shrunk to 1/20 of its side: under 2 px and under 1% of the area.
  const cv::Matx33d tiny(0.05, 0, 0, 0, 0.05, 0, 0, 0, 1);
  EXPECT_TRUE(warp_segments(boxes, segs, tiny, false, 1.0, 200, 200).boxes.empty());
  EXPECT_TRUE(warp_segments({}, {}, shift, false, 1.0, 200, 200).boxes.empty());
  EXPECT_FALSE(kestrel::testing::error_of([&] {
                 warp_segments(boxes, {}, shift, false, 1, 200, 200);
               }).empty());
}

TEST(FlipSegments, MirrorsPoints) {
  std::vector<PixelSegment> s = {{{10, 20}, {30, 5}}};
  flip_segments_lr(s, 100);
  EXPECT_EQ(s[0][0], cv::Point2d(90, 20));
  EXPECT_EQ(s[0][1], cv::Point2d(70, 5));
  flip_segments_ud(s, 50);
  EXPECT_EQ(s[0][0], cv::Point2d(90, 30));
  EXPECT_EQ(s[0][1], cv::Point2d(70, 45));
}

TEST(FlipMasks, MirrorsColumnsOrRows) {
  std::vector<cv::Mat> m = {(cv::Mat_<uint8_t>(2, 3) << 1, 2, 3, 4, 5, 6)};
  flip_masks_lr(m);
  EXPECT_EQ(cv::countNonZero(m[0] != (cv::Mat_<uint8_t>(2, 3) << 3, 2, 1, 6, 5, 4)), 0);
  flip_masks_ud(m);
  EXPECT_EQ(cv::countNonZero(m[0] != (cv::Mat_<uint8_t>(2, 3) << 6, 5, 4, 3, 2, 1)), 0);
}
