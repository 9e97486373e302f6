// Polygon labels: parsing and checks as detection's label_scan (same messages), the boxes of the
// reference's segments2boxes, and its resample_segments / segment2box. The reference numbers
// were printed by tests/scripts/seg_data_reference.py (v7.0's functions on the same inputs).
#include "yolo/data/seg_labels.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The quad of seg_data_reference.py's POLYGONS[0].
const PixelSegment kQuad = {{10.5, 20.25}, {300.75, 40.5}, {250.0, 400.125}, {30.0, 350.0}};

const fs::path kCocoSeg = "/work/shared/datasets/coco128-seg";

}  // namespace

TEST(ParseSegmentLabels, PolygonRowsGiveTheirBoxesAndPolygons) {
  // seg_data_reference.py: segments2boxes of these two float32 polygons.
  const auto p = parse_segment_labels(
      "3 0.1 0.2 0.5 0.1 0.9 0.6 0.3 0.8\n\n7 0.3 0.3 0.35 0.31 0.33 0.4\n", 0);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.boxes.size(), 2u);
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.boxes[0].cls, 3);
  EXPECT_EQ(p.boxes[0].x, 0.5f);
  EXPECT_EQ(p.boxes[0].y, 0.45000001788139343f);
  EXPECT_EQ(p.boxes[0].w, 0.7999999523162842f);
  EXPECT_EQ(p.boxes[0].h, 0.699999988079071f);
  EXPECT_EQ(p.boxes[1].cls, 7);
  EXPECT_EQ(p.boxes[1].x, 0.32499998807907104f);
  EXPECT_EQ(p.boxes[1].y, 0.3500000238418579f);
  EXPECT_EQ(p.boxes[1].w, 0.04999998211860657f);
  EXPECT_EQ(p.boxes[1].h, 0.09999999403953552f);
  EXPECT_EQ(p.segments[0], (std::vector<float>{0.1f, 0.2f, 0.5f, 0.1f, 0.9f, 0.6f, 0.3f, 0.8f}));
  EXPECT_EQ(p.segments[1], (std::vector<float>{0.3f, 0.3f, 0.35f, 0.31f, 0.33f, 0.4f}));
  EXPECT_EQ(p.duplicates, 0);
}

TEST(ParseSegmentLabels, BoxFilesHaveNoSegmentsAndMatchDetection) {
  const std::string text = "0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n";
  const auto p = parse_segment_labels(text, 0);
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_TRUE(p.segments.empty());
  EXPECT_EQ(p.boxes, parse_labels(text, 0).boxes);
}

TEST(ParseSegmentLabels, AShortRowInAPolygonFileIsAPolygonToo) {
  // As the reference: once any row has > 6 values, "c x y w h" is read as two points.
  const auto p = parse_segment_labels("0 0.1 0.1 0.4 0.1 0.4 0.5\n1 0.2 0.3 0.6 0.7\n", 0);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.segments[1], (std::vector<float>{0.2f, 0.3f, 0.6f, 0.7f}));
  EXPECT_FLOAT_EQ(p.boxes[1].w, 0.4f);
  EXPECT_FLOAT_EQ(p.boxes[1].x, 0.4f);
}

TEST(ParseSegmentLabels, BadRowsRefuseTheFileNamingTheRow) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {
           Case{"0 0.1 0.1 0.4 0.1 0.4 0.5\n0 0.1 0.1 0.4 0.1 0.4 0.5 0.3\n",
                "row 2: a polygon needs x y pairs"},
           Case{"0 0.1 0.1 0.4 0.1 1.4 0.5\n", "normalised to [0, 1]"},
           Case{"0 0.9 0.1 0.95 0.1 0.95 0.9 1.2 0.5\n", "normalised to [0, 1]"},
           Case{"-1 0.1 0.1 0.4 0.1 0.4 0.5\n", "row 1: class -1"},
           Case{"0 0.1 0.1 0.4 0.1 0.4 0.5\n5 0.1 0.1 0.4 0.1 0.4 0.5\n",
                "row 2: class 5 outside [0, 3)"},
           Case{"0 0.1 0.1 0.4 0.1 0.4 abc\n", "row 1: 'abc' is not a number"},
           Case{"0 0.1 0.1 0.1 0.1 0.1 0.1\n", "box width and height must be > 0"},
       }) {
    const auto p = parse_segment_labels(c.text, 3);
    EXPECT_TRUE(mentions(p.error, c.says)) << c.text << " -> " << p.error;
    EXPECT_TRUE(p.boxes.empty());
    EXPECT_TRUE(p.segments.empty());
  }
}

TEST(ParseSegmentLabels, PointsAreCheckedThroughTheirBoxAsTheReferenceDoes) {
  // The reference checks (class, x, y, w, h) after segments2boxes, not each point: a point a
  // little outside the image passes while the box's centre and size stay in [0, 1].
  const auto p = parse_segment_labels("0 0.1 -0.1 0.4 0.1 0.4 0.5\n", 0);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.segments.size(), 1u);
  EXPECT_EQ(p.segments[0][1], -0.1f);
  EXPECT_FLOAT_EQ(p.boxes[0].h, 0.6f);
}

TEST(ParseSegmentLabels, RowsWithARepeatedBoxAreDroppedWithTheirPolygon) {
  // Rows 1 and 3 differ as polygons but share class and box: the reference's np.unique on
  // (class, box) drops row 3. Row 4 repeats row 2 exactly.
  const auto p = parse_segment_labels(
      "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.5\n"
      "1 0.2 0.2 0.3 0.2 0.25 0.4\n"
      "0 0.1 0.1 0.5 0.5 0.2 0.3\n"
      "1 0.2 0.2 0.3 0.2 0.25 0.4\n",
      0);
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.duplicates, 2);
  ASSERT_EQ(p.boxes.size(), 2u);
  ASSERT_EQ(p.segments.size(), 2u);
  EXPECT_EQ(p.segments[0].size(), 8u);  // the first of the repeat, in file order
  EXPECT_EQ(p.boxes[1].cls, 1);
  EXPECT_EQ(p.segments[1], (std::vector<float>{0.2f, 0.2f, 0.3f, 0.2f, 0.25f, 0.4f}));
}

TEST(ParseSegmentLabels, EmptyTextIsNoLabels) {
  const auto p = parse_segment_labels("\n  \n", 0);
  EXPECT_TRUE(p.error.empty());
  EXPECT_TRUE(p.boxes.empty());
  EXPECT_TRUE(p.segments.empty());
}

TEST(ResampleSegment, MatchesTheReferenceAtAThousandPoints) {
  const PixelSegment r = resample_segment(kQuad);
  ASSERT_EQ(r.size(), 1000u);
  // seg_data_reference.py: resample_segments([quad], n=1000), exact doubles.
  const std::vector<std::tuple<int, double, double>> want = {
      {0, 10.5, 20.25},
      {1, 11.662162162162161, 20.33108108108108},
      {2, 12.824324324324325, 20.41216216216216},
      {333, 283.8333333333333, 160.37499999999997},
      {500, 249.55955955955952, 400.02464964964963},
      {998, 10.578078078078075, 21.570320320320263},
      {999, 10.5, 20.25},
  };
  for (const auto& [i, x, y] : want) {
    EXPECT_EQ(r[i].x, x) << i;
    EXPECT_EQ(r[i].y, y) << i;
  }
}

TEST(ResampleSegment, MatchesTheReferenceAtSevenPoints) {
  const PixelSegment r = resample_segment(kQuad, 7);
  const std::vector<std::pair<double, double>> want = {{10.5, 20.25},
                                                       {204.0, 33.75},
                                                       {283.8333333333333, 160.37499999999997},
                                                       {250.0, 400.125},
                                                       {103.33333333333337, 366.70833333333337},
                                                       {23.500000000000007, 240.08333333333343},
                                                       {10.5, 20.25}};
  ASSERT_EQ(r.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r[i].x, want[i].first) << i;
    EXPECT_EQ(r[i].y, want[i].second) << i;
  }
}

TEST(ResampleSegment, EmptyAndSinglePoints) {
  EXPECT_TRUE(resample_segment({}).empty());
  const PixelSegment one = resample_segment({{3, 4}}, 5);
  ASSERT_EQ(one.size(), 5u);
  for (const auto& p : one) EXPECT_EQ(p, cv::Point2d(3, 4));
}

TEST(SegmentToBox, KeepsPointsInsideTheImage) {
  // seg_data_reference.py: segment2box(POLYGONS[3], 320, 240).
  const auto b = segment_to_box({{-50.0, -20.0}, {90.0, 10.0}, {40.0, 60.0}}, 320, 240);
  EXPECT_EQ(b, (std::array<double, 4>{40.0, 10.0, 90.0, 60.0}));
  // Every inside x is 0: the reference's `if any(x)` gives zeros.
  EXPECT_EQ(segment_to_box({{0.0, 5.0}, {0.0, 9.0}, {-1.0, 3.0}}, 320, 240),
            (std::array<double, 4>{0, 0, 0, 0}));
  EXPECT_EQ(segment_to_box({{400.0, 5.0}}, 320, 240), (std::array<double, 4>{0, 0, 0, 0}));
  EXPECT_EQ(segment_to_box({{320.0, 240.0}, {10, 0}}, 320, 240),
            (std::array<double, 4>{10, 0, 320, 240}));
}

TEST(SegmentToPixels, ScalesInFloat32) {
  const PixelSegment p = segment_to_pixels({0.1f, 0.2f, 1.0f, 0.0f}, 640, 480, 2, 3);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].x, static_cast<double>(640.0f * 0.1f + 2.0f));
  EXPECT_EQ(p[0].y, static_cast<double>(480.0f * 0.2f + 3.0f));
  EXPECT_EQ(p[1], cv::Point2d(642, 3));
}

TEST(VerifyImageSegments, CocoSegLabelsMatchTheReference) {
  const fs::path labels = kCocoSeg / "labels" / "train2017";
  if (!fs::is_directory(labels)) GTEST_SKIP() << "no " << labels << ": coco128-seg check skipped";
  // seg_data_reference.py: verify_image_label on the first three label files.
  struct Want {
    const char* stem;
    std::vector<size_t> points;
    int cls;
    float x, y, w, h;
  };
  const std::vector<Want> want = {
      {"000000000009",
       {32, 53, 40, 43, 59, 28, 84, 34},
       45,
       0.3375000059604645f,
       0.41770848631858826f,
       0.675000011920929f,
       0.7770829796791077f},
      {"000000000025",
       {40, 43},
       23,
       0.185155987739563f,
       0.9002349972724915f,
       0.20468799769878387f,
       0.12910795211791992f},
      {"000000000030",
       {267, 30},
       58,
       0.518749475479126f,
       0.44976651668548584f,
       0.3968749940395355f,
       0.7546730041503906f},
  };
  for (const Want& w : want) {
    const std::string label = (labels / (std::string(w.stem) + ".txt")).string();
    const std::string image =
        (kCocoSeg / "images" / "train2017" / (std::string(w.stem) + ".jpg")).string();
    const SegPairCheck c = verify_image_segments(image, label, 80);
    ASSERT_TRUE(c.check.usable) << c.check.warning;
    EXPECT_TRUE(c.check.warning.empty()) << c.check.warning;
    ASSERT_EQ(c.segments.size(), w.points.size()) << w.stem;
    ASSERT_EQ(c.check.record.boxes.size(), w.points.size()) << w.stem;
    for (size_t i = 0; i < w.points.size(); ++i)
      EXPECT_EQ(c.segments[i].size(), 2 * w.points[i]) << w.stem << " " << i;
    const LabelBox& b = c.check.record.boxes[0];
    EXPECT_EQ(b.cls, w.cls);
    EXPECT_EQ(b.x, w.x);
    EXPECT_EQ(b.y, w.y);
    EXPECT_EQ(b.w, w.w);
    EXPECT_EQ(b.h, w.h);
  }
}

TEST(VerifyImageSegments, ABadPolygonFileIsCountedCorruptWithItsName) {
  const fs::path dir =
      fs::temp_directory_path() / ("kestrel_seglabels_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string label = (dir / "x.txt").string();
  std::ofstream(label) << "0 0.1 0.1 0.4 0.1 0.4\n";
  // No image there: detection's check refuses it, naming the image, before the labels.
  const SegPairCheck c = verify_image_segments((dir / "x.jpg").string(), label, 0);
  EXPECT_FALSE(c.check.usable);
  EXPECT_EQ(c.check.counts.corrupt, 1);
  EXPECT_TRUE(mentions(c.check.warning, "x.jpg"));
  EXPECT_TRUE(c.segments.empty());
  fs::remove_all(dir);
}
