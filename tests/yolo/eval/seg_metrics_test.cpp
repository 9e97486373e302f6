// Segmentation metrics against values recorded from the reference's own code (v7.0
// utils/segment/metrics.py fitness and Metric on numpy 2.4; segment/val.py's format strings) and
// hand-derived matching cases. Recorded doubles are compared exactly: the C++ sums in numpy's order.
#include "yolo/eval/seg_metrics.h"

#include <cmath>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace kt = kestrel::testing;

namespace {

Tensor rows(const std::vector<float>& v, int64_t cols) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size()) / cols, cols});
}
CorrectRow first(int n) {
  CorrectRow r{};
  for (int i = 0; i < n; ++i) r[i] = true;
  return r;
}

}  // namespace

TEST(SegMetrics, FitnessWeighsBothMapsAsTheReference) {
  // fitness(np.array([[0.712345678, 0.6543219, 0.55555555, 0.333333333, 0.61, 0.5900001,
  // 0.4444444, 0.2727272727, <4 losses>]])) printed with repr().
  EXPECT_EQ(seg_fitness(
                {0.712345678, 0.6543219, 0.55555555, 0.333333333, 0.61, 0.5900001, 0.4444444, 0.2727272727}),
            0.64545454013);
  EXPECT_EQ(seg_fitness({1, 1, 0, 0, 1, 1, 0, 0}), 0.0);
}

TEST(SegMetrics, MeansAreNumpysOverTheWholeApMatrix) {
  // 13 classes, ap[k][j] = fmod((10k + j) * a, 1), p[k] = fmod(k * a * 3, 1), r[k] = fmod(k * a * 5
  // + 0.1, 1), a = 0.1234567; Metric's properties printed with repr(). Here all_ap.mean()
  // (0.5091109961538464) and the mean of the per-class means (...465) differ in the last bit.
  constexpr double a = 0.1234567;
  ApResult r;
  for (int k = 0; k < 13; ++k) {
    std::array<double, kNumIouThresholds> row{};
    for (int j = 0; j < kNumIouThresholds; ++j) row[j] = std::fmod((k * 10 + j) * a, 1.0);
    r.ap.push_back(row);
    r.p.push_back(std::fmod(k * a * 3, 1.0));
    r.r.push_back(std::fmod(k * a * 5 + 0.1, 1.0));
    r.f1.push_back(0.5);
    r.classes.push_back(k);
  }
  const SegMetric m = seg_metric(r);
  EXPECT_EQ(m.map, 0.5091109961538464);
  EXPECT_EQ(m.map50, 0.48432507692307697);
  EXPECT_EQ(m.mp, 0.4529898307692307);
  EXPECT_EQ(m.mr, 0.49600869230769234);
  ASSERT_EQ(m.ap.size(), 13u);
  EXPECT_EQ(m.ap[1], 0.4901221500000001);
  EXPECT_EQ(m.ap50[2], std::fmod(20 * a, 1.0));

  const SegMetric none = seg_metric(ApResult{});
  EXPECT_EQ(none.map, 0.0);
  EXPECT_EQ(none.mp, 0.0);
}

TEST(SegMetrics, TableMatchesValPyFormat) {
  EXPECT_EQ(seg_metrics_header(),
            "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95)     "
            "Mask(P          R      mAP50  mAP50-95)");
  EXPECT_EQ(
      seg_metrics_row("all", 128, 929,
                      {0.712345678, 0.6543219, 0.55555555, 0.333333333, 0.61, 0.5900001, 0.0004444444, 1.0}),
      "                   all        128        929      0.712      0.654      0.556      0.333       0.61"
      "       0.59   0.000444          1");
  EXPECT_EQ(seg_metrics_row("a very long class name that overflows", 5, 0,
                            {0, 0, 0, 0, 1e-7, 12345.678, 0.1, 0.99951}),
            "a very long class name that overflows          5          0          0          0          0"
            "          0      1e-07   1.23e+04        0.1          1");
}

// --- matching -----------------------------------------------------------------------------------

TEST(SegMetrics, IouMatrixMatchingIsProcessBatchs) {
  // As metrics_test's box case, given as IoUs: one label, det0 at 0.62, det1 at 0.87. At 0.50-0.60
  // both pass and the per-label unique keeps det0 (the lower index after the per-detection one);
  // at 0.65-0.85 only det1; nothing at 0.90-0.95. A detection of another class never matches.
  const Tensor iou = rows({0.62f, 0.87f, 0.99f}, 3);
  const std::vector<CorrectRow> c = match_iou_matrix(iou, {0}, {0, 0, 1});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], first(3));
  EXPECT_EQ(c[1], (CorrectRow{false, false, false, true, true, true, true, true, false, false}));
  EXPECT_EQ(c[2], CorrectRow{});
  EXPECT_NE(kt::error_of([&] {
              match_iou_matrix(iou, {0, 1}, {0, 0, 1});
            }).find("(2, 3) IoU matrix"),
            std::string::npos);
}

TEST(SegMetrics, MatchMasksUsesMaskIou) {
  // 1 x 8 masks. Label: pixels 0-3. det0: pixels 0-2 (IoU 3/4), det1: pixels 0-5 (IoU 4/6); the
  // boxes are nonsense on purpose, only the masks count. det0 takes 0.50-0.75 (it is the better
  // match), det1 nothing there (the label is taken), and nothing passes 0.80.
  const Tensor dets = rows({0, 0, 1, 1, 0.9f, 0, 5, 5, 6, 6, 0.8f, 0}, 6);
  const Tensor labels = rows({0, 100, 100, 101, 101}, 5);
  const Tensor pred =
      Tensor::from_vector(std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 1, 8});
  const Tensor gt = Tensor::from_vector(std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0}, {1, 1, 8});
  const std::vector<CorrectRow> c = match_masks(dets, labels, pred, gt);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], first(6));
  EXPECT_EQ(c[1], CorrectRow{});
}

// --- the statistics -----------------------------------------------------------------------------

TEST(SegMetrics, NothingIsComputedWithoutACorrectMask) {
  // Boxes all correct, masks none: the reference checks stats[0] (the masks) and reports zeros.
  SegmentationStats s;
  const Tensor dets = rows({0, 0, 1, 1, 0.9f, 1}, 6);
  s.add({first(10)}, {CorrectRow{}}, dets, {1});
  const SegValMetrics m = s.compute(3);
  EXPECT_EQ(m.mean_results(), (std::array<double, 8>{}));
  EXPECT_TRUE(m.ap_class.empty());
  EXPECT_EQ(m.nt, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(m.maps, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(seg_metrics_table(m, 1, {"a", "b", "c"}, true).size(), 1u);
}

TEST(SegMetrics, BoxesAndMasksShareDetectionsButNotMatches) {
  // Two images, class 0: image 0 has one label and one detection (box and mask correct at every
  // threshold), image 1 one label and one detection whose box is correct at 0.50-0.70 and mask at
  // 0.50 only. Class 1 has a label and no detection.
  // Class 0 per threshold, detections by confidence: both correct gives recall (0.5, 1) at
  // precision (1, 1); only the first, recall (0.5, 0.5) at precision (1, 0.5). Boxes have the
  // first curve at 0.50-0.70, masks at 0.50 only.
  SegmentationStats s;
  s.add({first(10)}, {first(10)}, rows({0, 0, 1, 1, 0.9f, 0}, 6), {0});
  s.add({first(5)}, {first(1)}, rows({0, 0, 1, 1, 0.8f, 0}, 6), {0, 1});
  const SegValMetrics m = s.compute(2);
  ASSERT_EQ(m.ap_class, (std::vector<int>{0, 1}));
  const double full = compute_ap({0.5, 1.0}, {1.0, 1.0}), half = compute_ap({0.5, 0.5}, {1.0, 0.5});
  for (int t = 0; t < kNumIouThresholds; ++t) {
    EXPECT_DOUBLE_EQ(m.box.all_ap[0][t], t < 5 ? full : half) << t;
    EXPECT_DOUBLE_EQ(m.mask.all_ap[0][t], t < 1 ? full : half) << t;
    EXPECT_EQ(m.box.all_ap[1][t], 0.0);
  }
  EXPECT_GT(m.box.map, m.mask.map);
  EXPECT_EQ(m.maps[0], m.box.ap[0] + m.mask.ap[0]);  // box + mask, element by element
  EXPECT_EQ(m.maps[1], 0.0);
  EXPECT_EQ(m.class_result(0)[3], m.box.ap[0]);
  EXPECT_EQ(m.class_result(0)[7], m.mask.ap[0]);
  const std::vector<std::string> table = seg_metrics_table(m, 2, {"cat", "dog"}, true);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0], seg_metrics_row("all", 2, 3, m.mean_results()));
  EXPECT_EQ(table[2], seg_metrics_row("dog", 2, 1, m.class_result(1)));
  EXPECT_EQ(seg_metrics_table(m, 2, {"cat", "dog"}, false).size(), 1u);
  EXPECT_NE(kt::error_of([&] { seg_metrics_table(m, 2, {"cat"}, true); }).find("no name for class 1"),
            std::string::npos);
}
