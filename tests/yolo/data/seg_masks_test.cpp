// Polygons to masks: parity with the reference's polygon2mask, polygons2masks and
// polygons2masks_overlap (v7.0 utils/segment/dataloaders.py). The numbers were printed by
// tests/scripts/seg_data_reference.py on the same polygons: per mask its pixel sum, the sum of
// the flat indices (y * w + x) of its non-zero pixels and three pixels.
#include "yolo/data/seg_masks.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

constexpr int kH = 480, kW = 640;

// seg_data_reference.py's POLYGONS.
const std::vector<PixelSegment> kPolygons = {
    {{10.5, 20.25}, {300.75, 40.5}, {250.0, 400.125}, {30.0, 350.0}},
    {{320.9, 100.2}, {600.3, 120.7}, {610.0, 460.5}, {450.5, 300.0}, {330.1, 470.9}},
    {{100.0, 100.0}, {200.0, 100.0}, {200.0, 180.0}, {100.0, 180.0}},
    {{-50.0, -20.0}, {90.0, 10.0}, {40.0, 60.0}},
};

struct Stats {
  int64_t sum = 0, index_sum = 0;
  int px00 = 0, centre = 0, px30_50 = 0;
  bool operator==(const Stats&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Stats& s) {
  return os << "{sum " << s.sum << ", index_sum " << s.index_sum << ", px " << s.px00 << " "
            << s.centre << " " << s.px30_50 << "}";
}

Stats stats(const cv::Mat& m) {
  cv::Mat v;
  m.convertTo(v, CV_32S);
  Stats s;
  for (int y = 0; y < v.rows; ++y)
    for (int x = 0; x < v.cols; ++x) {
      const int p = v.at<int32_t>(y, x);
      s.sum += p;
      if (p != 0) s.index_sum += static_cast<int64_t>(y) * v.cols + x;
    }
  s.px00 = v.at<int32_t>(0, 0);
  s.centre = v.at<int32_t>(v.rows / 2, v.cols / 2);
  s.px30_50 = v.at<int32_t>(30 % v.rows, 50 % v.cols);
  return s;
}

std::vector<int64_t> value_counts(const cv::Mat& m, int values) {
  cv::Mat v;
  m.convertTo(v, CV_32S);
  std::vector<int64_t> counts(values, 0);
  for (int y = 0; y < v.rows; ++y)
    for (int x = 0; x < v.cols; ++x) ++counts.at(v.at<int32_t>(y, x));
  return counts;
}

}  // namespace

TEST(PolygonToMask, MatchesTheReferenceAtFullSize) {
  const std::vector<Stats> want = {{89091, 11137850610, 0, 0, 1},
                                   {76816, 12347189460, 0, 0, 0},
                                   {8181, 734244750, 0, 0, 0},
                                   {3296, 47730834, 1, 0, 1}};
  for (size_t i = 0; i < kPolygons.size(); ++i) {
    const cv::Mat m = polygon_to_mask(kH, kW, kPolygons[i]);
    ASSERT_EQ(m.type(), CV_8U);
    ASSERT_EQ(m.size(), cv::Size(kW, kH));
    EXPECT_EQ(stats(m), want[i]) << i;
  }
}

TEST(PolygonToMask, MatchesTheReferenceDownsampled) {
  const std::vector<Stats> want = {{5600, 43547970, 0, 0, 1},
                                   {4832, 48652484, 0, 0, 0},
                                   {500, 2778500, 0, 0, 0},
                                   {209, 177983, 1, 0, 0}};
  for (size_t i = 0; i < kPolygons.size(); ++i) {
    const cv::Mat m = polygon_to_mask(kH, kW, kPolygons[i], 1, 4);
    ASSERT_EQ(m.size(), cv::Size(kW / 4, kH / 4));
    EXPECT_EQ(stats(m), want[i]) << i;
  }
  // Colour 255 at ratio 2: the bilinear resize makes in-between values on the edges.
  EXPECT_EQ(stats(polygon_to_mask(kH, kW, kPolygons[1], 255, 2)),
            (Stats{4897129, 780679495, 0, 0, 0}));
}

TEST(PolygonToMask, HandCases) {
  // A 4x3 rectangle of pixels: fillPoly includes both ends of each edge.
  const cv::Mat m = polygon_to_mask(10, 10, {{2, 3}, {5, 3}, {5, 5}, {2, 5}}, 7);
  EXPECT_EQ(cv::countNonZero(m), 12);
  EXPECT_EQ(m.at<uint8_t>(3, 2), 7);
  EXPECT_EQ(m.at<uint8_t>(5, 5), 7);
  EXPECT_EQ(m.at<uint8_t>(6, 5), 0);
  // Points are truncated toward zero, as astype(np.int32).
  EXPECT_EQ(
      cv::countNonZero(polygon_to_mask(10, 10, {{2.9, 3.9}, {5.9, 3.9}, {5.9, 5.9}, {2.9, 5.9}})),
      12);
  EXPECT_EQ(cv::countNonZero(polygon_to_mask(10, 10, {})), 0);
  // Absurd coordinates neither crash nor wrap.
  EXPECT_EQ(cv::countNonZero(polygon_to_mask(
                10, 10, {{-1e30, -1e30}, {1e30, -1e30}, {1e30, 1e30}, {-1e30, 1e30}})),
            100);
  EXPECT_EQ(polygon_to_mask(10, 10, {{0, 0}, {9, 0}, {9, 9}}, 1, 3).size(), cv::Size(3, 3));
  EXPECT_TRUE(kestrel::testing::error_of([] { polygon_to_mask(10, 10, {}, 1, 0); }).find("ratio") !=
              std::string::npos);
  EXPECT_TRUE(kestrel::testing::error_of([] { polygon_to_mask(3, 3, {}, 1, 4); }).find("empty") !=
              std::string::npos);
}

TEST(PolygonsToMasks, OneMaskPerInstanceInOrder) {
  const auto masks = polygons_to_masks(kH, kW, kPolygons, 1, 4);
  ASSERT_EQ(masks.size(), 4u);
  EXPECT_EQ(stats(masks[2]).sum, 500);
  EXPECT_EQ(stats(masks[3]).sum, 209);
  EXPECT_TRUE(polygons_to_masks(kH, kW, {}, 1, 4).empty());
}

TEST(PolygonsToMasksOverlap, MatchesTheReference) {
  struct Want {
    int ratio;
    Stats stats;
    std::vector<int64_t> counts;
  };
  for (const Want& w : {Want{1, {270764, 23498927859, 4, 0, 4}, {139502, 79405, 76816, 8181, 3296}},
                        Want{4, {17002, 92246800, 4, 0, 1}, {8657, 5002, 4832, 500, 209}}}) {
    const OverlapMasks o = polygons_to_masks_overlap(kH, kW, kPolygons, w.ratio);
    ASSERT_EQ(o.mask.type(), CV_8U);
    EXPECT_EQ(o.order, (std::vector<int64_t>{0, 1, 2, 3})) << w.ratio;
    EXPECT_EQ(stats(o.mask), w.stats) << w.ratio;
    EXPECT_EQ(value_counts(o.mask, 5), w.counts) << w.ratio;
  }
}

TEST(PolygonsToMasksOverlap, SmallerInstancesAreDrawnOverLargerOnes) {
  // Given smallest first, the order puts the largest first and the small square wins its pixels.
  const std::vector<PixelSegment> polys = {{{2, 2}, {3, 2}, {3, 3}, {2, 3}},
                                           {{0, 0}, {9, 0}, {9, 9}, {0, 9}},
                                           {{20, 20}, {20, 20}, {20, 20}}};  // outside: area 0
  const OverlapMasks o = polygons_to_masks_overlap(10, 10, polys);
  // The reference negates uint64 areas, so an empty instance sorts first (seg_data_reference.py:
  // "small over large").
  EXPECT_EQ(o.order, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(o.mask.at<uint8_t>(2, 2), 3);
  EXPECT_EQ(o.mask.at<uint8_t>(5, 5), 2);
  EXPECT_EQ(value_counts(o.mask, 4), (std::vector<int64_t>{0, 0, 96, 4}));
}

TEST(PolygonsToMasksOverlap, UpTo255InstancesWrapAsTheReferencesUint8) {
  // seg_data_reference.py "nested 200": past 127 nested instances the reference's uint8 sum wraps
  // before its clip, so the centre holds 143, not 200.
  std::vector<PixelSegment> polys;
  for (int i = 0; i < 200; ++i) {
    const double lo = i, hi = 419 - i;
    polys.push_back({{lo, lo}, {hi, lo}, {hi, hi}, {lo, hi}});
  }
  const OverlapMasks o = polygons_to_masks_overlap(420, 420, polys);
  ASSERT_EQ(o.mask.type(), CV_8U);
  EXPECT_EQ(stats(o.mask).sum, 10785228);
  EXPECT_EQ(o.mask.at<uint8_t>(210, 210), 143);
  EXPECT_EQ(o.mask.at<uint8_t>(130, 130), 5);
  EXPECT_EQ(o.mask.at<uint8_t>(127, 127), 128);
  EXPECT_EQ(o.mask.at<uint8_t>(0, 0), 1);
}

TEST(PolygonsToMasksOverlap, ManyInstancesSwitchToInt32) {
  // 300 nested squares, all different areas: int32 as the reference, smallest on top.
  std::vector<PixelSegment> polys;
  for (int i = 0; i < 300; ++i) {
    const double lo = i, hi = 599 - i;
    polys.push_back({{lo, lo}, {hi, lo}, {hi, hi}, {lo, hi}});
  }
  const OverlapMasks o = polygons_to_masks_overlap(600, 600, polys);
  ASSERT_EQ(o.mask.type(), CV_32S);
  EXPECT_EQ(o.mask.at<int32_t>(300, 300), 300);
  EXPECT_EQ(o.mask.at<int32_t>(0, 0), 1);
  EXPECT_EQ(o.order.front(), 0);
  EXPECT_EQ(o.order.back(), 299);
}

TEST(PolygonsToMasksOverlap, CocoSegMatchesTheReference) {
  const fs::path root = "/work/shared/datasets/coco128-seg";
  const fs::path labels = root / "labels" / "train2017";
  if (!fs::is_directory(labels)) GTEST_SKIP() << "no " << labels << ": coco128-seg check skipped";
  // seg_data_reference.py: the first three label files' polygons (xyn2xy at 640x480), masks and
  // overlap at downsample 4.
  struct Want {
    const char* stem;
    std::vector<int64_t> sums;
    std::vector<int64_t> order;
    Stats overlap;
  };
  const std::vector<Want> want = {
      {"000000000009",
       {1553, 2269, 4457, 222, 142, 187, 107, 3134},
       {2, 7, 1, 0, 3, 5, 4, 6},
       {27364, 132885246, 0, 1, 0}},
      {"000000000025", {201, 1421}, {1, 0}, {1823, 19246741, 0, 0, 0}},
      {"000000000030", {2956, 1144}, {0, 1}, {4750, 28827254, 0, 2, 0}},
  };
  for (const Want& w : want) {
    std::ifstream in(labels / (std::string(w.stem) + ".txt"), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const ParsedSegLabels parsed = parse_segment_labels(text.str(), 80);
    ASSERT_TRUE(parsed.error.empty()) << parsed.error;
    std::vector<PixelSegment> polys;
    for (const auto& s : parsed.segments) polys.push_back(segment_to_pixels(s, kW, kH));
    const auto masks = polygons_to_masks(kH, kW, polys, 1, 4);
    std::vector<int64_t> sums;
    for (const auto& m : masks) sums.push_back(stats(m).sum);
    EXPECT_EQ(sums, w.sums) << w.stem;
    const OverlapMasks o = polygons_to_masks_overlap(kH, kW, polys, 4);
    EXPECT_EQ(o.order, w.order) << w.stem;
    EXPECT_EQ(stats(o.mask), w.overlap) << w.stem;
  }
}
