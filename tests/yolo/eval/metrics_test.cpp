// Detection metrics against values derived by hand from the reference's numpy code (val.py
// process_batch, utils/metrics.py ap_per_class / compute_ap / smooth / fitness / ConfusionMatrix).
//
// Facts the derivations use:
// - compute_ap interpolates at x = k / 100 (k * 0.01 in double: exactly 0.25, 0.5, 0.75 for
//   k = 25, 50, 75) with np.interp, which takes the LAST xp[j] <= x and returns fp[j] when x sits
//   on it. At x = 1 that is the closing sentinel (1, 0), so a perfect curve scores
//   trapz([1] * 100 + [0]) = 0.99 + 0.005 = 0.995.
// - P and R are read where smooth(mean F1, 0.1) peaks (101-tap box filter, edge padded). In the
//   cases below the mean F1 is largest, and flat, for every confidence below the lowest
//   detection's (px < 0.5, i.e. > 100 grid points): the windows there are sums of identical
//   values, argmax returns the first, index 0, where p and r are the curves' last values.
// Tolerance 1e-12: the expected values are exact decimals; the computation rounds a few times.
#include "yolo/eval/metrics.h"

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

constexpr double kTol = 1e-12;

Tensor rows(const std::vector<float>& v, int64_t cols) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size()) / cols, cols});
}
CorrectRow all(bool v) {
  CorrectRow r;
  r.fill(v);
  return r;
}
// True at the first n thresholds.
CorrectRow first(int n) {
  CorrectRow r{};
  for (int i = 0; i < n; ++i) r[i] = true;
  return r;
}

}  // namespace

TEST(Metrics, IouThresholdsAreTheFloat32Linspace) {
  const std::array<float, 10> want = {0.5f,  0.55f, 0.6f,  0.65f, 0.7f,
                                      0.75f, 0.8f,  0.85f, 0.9f,  0.95f};
  EXPECT_EQ(iou_thresholds(), want);
}

// --- process_batch --------------------------------------------------------------------------

TEST(Metrics, MatchingPrefersTheLowerDetectionIndexPerLabel) {
  // One label [0,0,10,10]. det0 covers 6.2 of its 10 rows (IoU 0.62), det1 8.7 (IoU 0.87).
  // At 0.50-0.60 both match; after the descending sort and the per-detection unique (ordered by
  // detection), the per-label unique keeps det0: the reference's second sort is commented out.
  // At 0.65-0.85 only det1 matches; at 0.90-0.95 nothing does.
  Tensor labels = rows({0, 0, 0, 10, 10}, 5);
  Tensor dets = rows({0, 0, 10, 6.2f, 0.9f, 0, 0, 0, 10, 8.7f, 0.8f, 0}, 6);
  const std::vector<CorrectRow> c = match_predictions(dets, labels);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], first(3));
  const CorrectRow det1 = {false, false, false, true, true, true, true, true, false, false};
  EXPECT_EQ(c[1], det1);
}

TEST(Metrics, MatchingIsOneToOneAndClassAware) {
  // Labels: class 0 [0,0,10,10], class 0 [0,0,10,8]. det0 (class 0) equals label 0 and has IoU
  // 0.8 with label 1; det1 (class 0) equals label 1 and has IoU 0.8 with label 0; det2 (class 1)
  // equals label 0 but the class differs. Sorted by IoU, each detection takes its IoU-1 label.
  Tensor labels = rows({0, 0, 0, 10, 10, 0, 0, 0, 10, 8}, 5);
  Tensor dets = rows({0, 0, 10, 10, 0.9f, 0, 0, 0, 10, 8, 0.8f, 0, 0, 0, 10, 10, 0.7f, 1}, 6);
  const std::vector<CorrectRow> c = match_predictions(dets, labels);
  EXPECT_EQ(c[0], all(true));
  EXPECT_EQ(c[1], all(true));
  EXPECT_EQ(c[2], all(false));
}

TEST(Metrics, DuplicateDetectionIsAFalsePositive) {
  // Two identical detections on one label, IoU 1 each: equal IoUs, so after the reversed
  // ascending sort det1 comes first, the per-detection unique keeps both, ordered by detection,
  // and the per-label unique keeps det0.
  Tensor labels = rows({0, 0, 0, 10, 10}, 5);
  Tensor dets = rows({0, 0, 10, 10, 0.9f, 0, 0, 0, 10, 10, 0.8f, 0}, 6);
  const std::vector<CorrectRow> c = match_predictions(dets, labels);
  EXPECT_EQ(c[0], all(true));
  EXPECT_EQ(c[1], all(false));
}

TEST(Metrics, MatchingWithoutLabelsOrDetections) {
  Tensor dets = rows({0, 0, 10, 10, 0.9f, 0}, 6);
  EXPECT_EQ(match_predictions(dets, Tensor::empty({0, 5})), std::vector<CorrectRow>{all(false)});
  EXPECT_TRUE(match_predictions(Tensor::empty({0, 6}), rows({0, 0, 0, 1, 1}, 5)).empty());
  EXPECT_THROW(match_predictions(rows({0, 0, 1, 1, 0.5f}, 5), rows({0, 0, 0, 1, 1}, 5)), Error);
}

// --- compute_ap -----------------------------------------------------------------------------

TEST(Metrics, PerfectCurveScores0995) {
  EXPECT_NEAR(compute_ap({0.5, 1.0}, {1.0, 1.0}), 0.995, kTol);
  EXPECT_NEAR(compute_ap({1.0}, {1.0}), 0.995, kTol);
}

TEST(Metrics, ApOfAMixedCurve) {
  // TP, FP, TP, TP over 4 labels: recall .25 .25 .5 .75, precision 1 .5 2/3 .75.
  // mrec [0 .25 .25 .5 .75 1], envelope [1 1 .75 .75 .75 0]. Interpolated: 1 for k < 25, .75 at
  // k = 25 (the last xp equal to .25 is the second), .75 up to k = 75, 3 (1 - x) after, 0 at 1.
  // trapz: .24 + .00875 + .375 + .00735 + .08625 + .00015 = .7175.
  EXPECT_NEAR(compute_ap({0.25, 0.25, 0.5, 0.75}, {1.0, 0.5, 2.0 / 3.0, 0.75}), 0.7175, kTol);
}

TEST(Metrics, ApWithLeadingFalsePositive) {
  // FP then TP, one label: mrec [0 0 1 1], envelope [1 .5 .5 0]: .5 from x = 0 (the last xp
  // equal to 0) to .99, 0 at 1: 99 * .005 + .0025 = .4975.
  EXPECT_NEAR(compute_ap({0.0, 1.0}, {0.0, 0.5}), 0.4975, kTol);
  EXPECT_NEAR(compute_ap({0.0}, {0.0}), 0.0, kTol);
}

TEST(Metrics, SmoothIsA101TapBoxFilterOnAThousandPoints) {
  std::vector<double> y(1000, 0.0);
  y[500] = 1.0;
  const std::vector<double> s = smooth(y, 0.1);
  ASSERT_EQ(s.size(), 1000u);
  for (int k = 0; k < 1000; ++k)
    EXPECT_NEAR(s[k], (k >= 450 && k <= 550) ? 1.0 / 101 : 0.0, 1e-15) << k;
  // Edge padding repeats the end values: a ramp keeps its ends' means.
  std::vector<double> ramp(1000);
  for (int k = 0; k < 1000; ++k) ramp[k] = k;
  const std::vector<double> r = smooth(ramp, 0.1);
  // Window of k = 0: 50 copies of 0, then 0..50: sum 1275 / 101.
  EXPECT_NEAR(r[0], 1275.0 / 101, 1e-9);
  EXPECT_NEAR(r[500], 500.0, 1e-9);
}

// --- ap_per_class -------------------------------------------------------------------------------

TEST(Metrics, PerfectPredictions) {
  const ApResult res = ap_per_class({all(true), all(true)}, {0.9f, 0.8f}, {0, 0}, {0, 0});
  ASSERT_EQ(res.classes, std::vector<int>{0});
  for (double ap : res.ap[0]) EXPECT_NEAR(ap, 0.995, kTol);
  EXPECT_DOUBLE_EQ(res.p[0], 1.0);
  EXPECT_DOUBLE_EQ(res.r[0], 1.0);
  EXPECT_NEAR(res.f1[0], 1.0, kTol);
  EXPECT_EQ(res.tp[0], 2.0);
  EXPECT_EQ(res.fp[0], 0.0);
}

TEST(Metrics, SingleClassMixed) {
  // The curve of ApOfAMixedCurve. F1 is .75 for px <= .6 (p = r = .75) and below that
  // elsewhere, so P = R = .75; tp = round(.75 * 4) = 3, fp = round(3 / .75 - 3) = 1.
  const ApResult res = ap_per_class({all(true), all(false), all(true), all(true)},
                                    {0.9f, 0.8f, 0.7f, 0.6f}, {0, 0, 0, 0}, {0, 0, 0, 0});
  for (double ap : res.ap[0]) EXPECT_NEAR(ap, 0.7175, kTol);
  EXPECT_NEAR(res.p[0], 0.75, kTol);
  EXPECT_NEAR(res.r[0], 0.75, kTol);
  EXPECT_NEAR(res.f1[0], 0.75, kTol);
  EXPECT_EQ(res.tp[0], 3.0);
  EXPECT_EQ(res.fp[0], 1.0);
}

TEST(Metrics, OrderComesFromConfidenceNotInput) {
  // The SingleClassMixed detections shuffled: same result.
  const ApResult res = ap_per_class({all(true), all(true), all(false), all(true)},
                                    {0.6f, 0.9f, 0.8f, 0.7f}, {0, 0, 0, 0}, {0, 0, 0, 0});
  EXPECT_NEAR(res.ap[0][0], 0.7175, kTol);
}

TEST(Metrics, ConfidenceTiesKeepInputOrder) {
  // Equal confidences: a stable sort keeps TP before FP (AP .995) or FP before TP (AP .4975).
  EXPECT_NEAR(ap_per_class({all(true), all(false)}, {0.7f, 0.7f}, {0, 0}, {0}).ap[0][0], 0.995,
              kTol);
  EXPECT_NEAR(ap_per_class({all(false), all(true)}, {0.7f, 0.7f}, {0, 0}, {0}).ap[0][0], 0.4975,
              kTol);
}

TEST(Metrics, ClassesWithoutLabelsAreIgnoredAndWithoutPredictionsScoreZero) {
  // Class 2 has predictions but no labels: not reported. Class 1 has a label but no prediction:
  // AP 0, P 0, R 0.
  const ApResult res = ap_per_class({all(true), all(false)}, {0.9f, 0.8f}, {0, 2}, {0, 1});
  EXPECT_EQ(res.classes, (std::vector<int>{0, 1}));
  EXPECT_NEAR(res.ap[0][0], 0.995, kTol);
  EXPECT_EQ(res.ap[1][0], 0.0);
  EXPECT_EQ(res.p[1], 0.0);
  EXPECT_EQ(res.r[1], 0.0);
  EXPECT_TRUE(ap_per_class({}, {}, {}, {}).classes.empty());
}

// --- val's statistics -----------------------------------------------------------------------

namespace {
// Two classes: class 0 as SingleClassMixed (one image), class 1 one label and one detection
// (conf .5) correct at IoU 0.50-0.70 only (another image).
DetectionStats two_class_stats() {
  DetectionStats stats;
  Tensor d0 = rows({0, 0, 1, 1, 0.9f, 0, 0, 0, 1, 1, 0.8f, 0, 0, 0, 1, 1, 0.7f, 0,  //
                    0, 0, 1, 1, 0.6f, 0},
                   6);
  stats.add({all(true), all(false), all(true), all(true)}, d0, {0, 0, 0, 0});
  stats.add({first(5)}, rows({0, 0, 1, 1, 0.5f, 1}, 6), {1});
  return stats;
}
}  // namespace

TEST(Metrics, TwoClasses) {
  // Class 1: AP .995 at five thresholds, 0 at the others (no TP: envelope 0 from x = 0), mean
  // .4975. Mean F1 over classes: (.75 + 1) / 2 for px < .5, less elsewhere: P = (.75, 1),
  // R = (.75, 1). mAP50 = (.7175 + .995) / 2, mAP50-95 = (.7175 + .4975) / 2.
  const ValMetrics m = two_class_stats().compute(3);
  EXPECT_EQ(m.ap_class, (std::vector<int>{0, 1}));
  EXPECT_NEAR(m.p[0], 0.75, kTol);
  EXPECT_NEAR(m.p[1], 1.0, kTol);
  EXPECT_NEAR(m.r[1], 1.0, kTol);
  EXPECT_NEAR(m.ap50[1], 0.995, kTol);
  EXPECT_NEAR(m.ap[0], 0.7175, kTol);
  EXPECT_NEAR(m.ap[1], 0.4975, kTol);
  EXPECT_NEAR(m.mp, 0.875, kTol);
  EXPECT_NEAR(m.mr, 0.875, kTol);
  EXPECT_NEAR(m.map50, 0.85625, kTol);
  EXPECT_NEAR(m.map, 0.6075, kTol);
  EXPECT_EQ(m.nt, (std::vector<int64_t>{4, 1, 0}));
  // Class 2 has no labels: its maps entry is the overall mAP.
  EXPECT_NEAR(m.maps[0], 0.7175, kTol);
  EXPECT_NEAR(m.maps[1], 0.4975, kTol);
  EXPECT_NEAR(m.maps[2], 0.6075, kTol);
  // 0.1 * .85625 + 0.9 * .6075.
  EXPECT_NEAR(fitness(m), 0.632375, kTol);
}

TEST(Metrics, NoPredictionsGiveZeros) {
  DetectionStats stats;
  stats.add({}, Tensor::empty({0, 6}), {0, 1, 1});
  const ValMetrics m = stats.compute(2);
  EXPECT_EQ(m.mp, 0.0);
  EXPECT_EQ(m.map, 0.0);
  EXPECT_TRUE(m.ap_class.empty());
  EXPECT_EQ(m.nt, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m.maps, (std::vector<double>{0.0, 0.0}));
}

TEST(Metrics, NoLabelsGiveZeros) {
  DetectionStats stats;
  stats.add({all(false)}, rows({0, 0, 1, 1, 0.9f, 0}, 6), {});
  const ValMetrics m = stats.compute(1);
  EXPECT_EQ(m.map50, 0.0);
  EXPECT_EQ(m.mr, 0.0);
  EXPECT_EQ(m.nt, (std::vector<int64_t>{0}));
}

TEST(Metrics, DuplicateDetectionThroughTheWholePipeline) {
  // DuplicateDetectionIsAFalsePositive's detections: TP (.9) then FP (.8) on one label; the FP
  // comes after full recall, so AP stays .995 at every threshold.
  Tensor labels = rows({0, 0, 0, 10, 10}, 5);
  Tensor dets = rows({0, 0, 10, 10, 0.9f, 0, 0, 0, 10, 10, 0.8f, 0}, 6);
  DetectionStats stats;
  stats.add(match_predictions(dets, labels), dets, {0});
  const ValMetrics m = stats.compute(1);
  EXPECT_NEAR(m.map50, 0.995, kTol);
  EXPECT_NEAR(m.map, 0.995, kTol);
}

TEST(Metrics, RefusesLabelsOutsideTheClasses) {
  DetectionStats stats;
  stats.add({}, Tensor::empty({0, 6}), {3});
  EXPECT_THROW(stats.compute(2), Error);
  EXPECT_THROW(stats.add({all(true)}, Tensor::empty({0, 6}), {}), Error);
}

TEST(Metrics, FitnessWeights) {
  EXPECT_NEAR(fitness(1.0, 1.0, 0.0, 0.0), 0.0, kTol);
  EXPECT_NEAR(fitness(0.0, 0.0, 1.0, 0.0), 0.1, kTol);
  EXPECT_NEAR(fitness(0.0, 0.0, 0.0, 1.0), 0.9, kTol);
}

TEST(Metrics, TableFormatting) {
  EXPECT_EQ(metrics_header(),
            "                 Class     Images  Instances          P          R      mAP50   "
            "mAP50-95");
  EXPECT_EQ(metrics_row("all", 128, 929, 0.5, 0.25, 0.123456, 0.0),
            "                   all        128        929        0.5       0.25      0.123"
            "          0");
  EXPECT_EQ(metrics_row("a-very-long-class-name-here", 1, 2, 1, 1, 1, 1).substr(0, 27),
            "a-very-long-class-name-here");
}

TEST(Metrics, TableHasAnAllRowThenOneRowPerClass) {
  const ValMetrics m = two_class_stats().compute(3);
  const std::vector<std::string> names = {"person", "car", "dog"};
  const std::vector<std::string> lines = metrics_table(m, 2, names, true);
  ASSERT_EQ(lines.size(), 3u);
  // 5 labels over both images; the class rows carry each class's own label count.
  EXPECT_EQ(lines[0], metrics_row("all", 2, 5, m.mp, m.mr, m.map50, m.map));
  EXPECT_EQ(lines[1], metrics_row("person", 2, 4, m.p[0], m.r[0], m.ap50[0], m.ap[0]));
  EXPECT_EQ(lines[2].substr(0, 22), std::string(19, ' ') + "car");
  EXPECT_EQ(metrics_table(m, 2, names, false).size(), 1u);
  EXPECT_THROW(metrics_table(m, 2, {"person"}, true), Error);
}

TEST(Metrics, PerClassRowsOnlyOutsideTrainingOrWhenVerbose) {
  EXPECT_FALSE(per_class_rows(false, true, 4)) << "per-epoch validation during training";
  EXPECT_TRUE(per_class_rows(true, true, 4)) << "the final validation of best (verbose)";
  EXPECT_TRUE(per_class_rows(false, false, 4)) << "kestrel val below 50 classes";
  EXPECT_FALSE(per_class_rows(false, false, 80)) << "kestrel val at 80 classes needs --verbose";
  EXPECT_TRUE(per_class_rows(true, false, 80));
  EXPECT_FALSE(per_class_rows(true, false, 1)) << "one class: the all row says it";
}

// --- confusion matrix -----------------------------------------------------------------------

TEST(Metrics, ConfusionMatrixCountsMatchesMissesAndBackground) {
  // Labels: class 0 at A, class 1 at B. Detections: class 0 on A (correct), class 0 on B (wrong
  // class), class 1 far away (background), and one under the 0.25 confidence threshold.
  ConfusionMatrix cm(2);
  Tensor labels = rows({0, 0, 0, 10, 10, 1, 20, 20, 30, 30}, 5);
  Tensor dets = rows({0, 0, 10, 10, 0.9f, 0,   //
                      20, 20, 30, 30, 0.8f, 0,  //
                      50, 50, 60, 60, 0.7f, 1,  //
                      0, 0, 10, 10, 0.2f, 1},
                     6);
  cm.process_batch(dets, labels);
  EXPECT_EQ(cm.at(0, 0), 1);
  EXPECT_EQ(cm.at(0, 1), 1);
  EXPECT_EQ(cm.at(1, 2), 1);
  double total = 0;
  for (int p = 0; p <= 2; ++p)
    for (int t = 0; t <= 2; ++t) total += cm.at(p, t);
  EXPECT_EQ(total, 3);
  cm.process_labels_only({1, 1});
  EXPECT_EQ(cm.at(2, 1), 2);
  EXPECT_EQ(cm.true_positives(), (std::vector<double>{1, 0}));
  EXPECT_EQ(cm.false_positives(), (std::vector<double>{1, 1}));
}

TEST(Metrics, ConfusionMatrixWithoutAnyMatchCountsOnlyLabels) {
  // As the reference: with no match at all, unmatched detections are not counted.
  ConfusionMatrix cm(1);
  cm.process_batch(rows({50, 50, 60, 60, 0.9f, 0}, 6), rows({0, 0, 0, 10, 10}, 5));
  EXPECT_EQ(cm.at(1, 0), 1);
  EXPECT_EQ(cm.at(0, 1), 0);
}

TEST(Metrics, ConfusionMatrixOneDetectionPerLabel) {
  // Two detections on one label: the higher IoU takes it, the other is background.
  ConfusionMatrix cm(1);
  cm.process_batch(rows({0, 0, 10, 9, 0.9f, 0, 0, 0, 10, 10, 0.8f, 0}, 6),
                   rows({0, 0, 0, 10, 10}, 5));
  EXPECT_EQ(cm.at(0, 0), 1);
  EXPECT_EQ(cm.at(0, 1), 1);
  EXPECT_EQ(cm.at(1, 0), 0);
}
