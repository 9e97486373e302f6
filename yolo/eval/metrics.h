// Detection metrics with the reference v7.0's definitions (val.py process_batch, utils/metrics.py
// ap_per_class, compute_ap, smooth, fitness, ConfusionMatrix), computed with the same float32 IoUs
// and the same float64 operations as its numpy code (np.interp, np.trapz's pairwise sum), so the
// numbers equal the reference's on the same detections and labels.
//
// Where the reference's result depends on how numpy orders equal values, we take the order numpy's
// default sort gives small arrays (insertion sort: stable): detections with equal confidence keep
// their input order, and in the matching, pairs with equal IoU keep the reverse of their
// (label, detection) order after the descending sort ([::-1] of an ascending argsort).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "yolo/common/smooth.h"

namespace kestrel::yolo {

constexpr int kNumIouThresholds = 10;
// 0.50:0.05:0.95 as the reference's torch.linspace(0.5, 0.95, 10) in float32.
const std::array<float, kNumIouThresholds>& iou_thresholds();

using CorrectRow = std::array<bool, kNumIouThresholds>;

// The reference's process_batch: for each detection and IoU threshold, whether it is a true
// positive under one-to-one matching (pairs with IoU >= threshold and equal class, by IoU
// descending, one per detection, then one per label taking the lowest detection index, as the
// reference does with its second sort commented out). detections (K, 6): x1, y1, x2, y2, conf,
// class; labels (M, 5): class, x1, y1, x2, y2; both CPU float32 in the same pixel space.
std::vector<CorrectRow> match_predictions(const Tensor& detections, const Tensor& labels);
// The same matching over a given (labels, detections) IoU matrix, row-major (box IoU above; mask
// IoU for segmentation), with each label's and detection's class.
std::vector<CorrectRow> match_iou_matrix(const float* iou, const std::vector<float>& label_classes,
                                         const std::vector<float>& detection_classes);

// The area under the precision envelope by 101-point interpolation (np.interp + np.trapz). A
// perfect curve gives 0.995, not 1: the interpolation at recall 1 lands on the closing (1, 0)
// sentinel.
double compute_ap(const std::vector<double>& recall, const std::vector<double>& precision);

constexpr int kCurvePoints = 1000;  // the confidence grid px = linspace(0, 1, 1000)

struct ApResult {
  std::vector<int> classes;  // classes present in the labels, ascending
  // Per class, at the confidence where the smoothed mean F1 peaks.
  std::vector<double> tp, fp, p, r, f1;
  std::vector<std::array<double, kNumIouThresholds>> ap;
  // Per class over px (for plots): precision, recall, F1, and precision against recall at
  // IoU 0.5 (empty for a class without predictions).
  std::vector<std::vector<double>> p_curve, r_curve, f1_curve, pr_curve;
};

// tp: one row per detection; conf, pred_cls: per detection; target_cls: per label.
ApResult ap_per_class(const std::vector<CorrectRow>& tp, const std::vector<float>& conf,
                      const std::vector<float>& pred_cls, const std::vector<float>& target_cls);

// What val prints and returns.
struct ValMetrics {
  double mp = 0, mr = 0, map50 = 0, map = 0;
  std::vector<int> ap_class;                 // classes with a per-class row
  std::vector<double> p, r, ap50, ap;         // per ap_class entry (ap: mean over thresholds)
  std::vector<int64_t> nt;                    // labels per class (nc entries)
  std::vector<double> maps;                   // per class mAP50-95, `map` for classes without
  ApResult details;                           // empty unless some detection was correct
};

// The per-image statistics val.py collects, and its final computation.
class DetectionStats {
 public:
  // One image: the correct rows of its detections, their conf and class (detections (K, 6) CPU
  // float32 as NMS returns them) and the classes of its labels.
  void add(const std::vector<CorrectRow>& correct, const Tensor& detections,
           const std::vector<float>& label_classes);
  // Metrics for nc classes. As the reference, all zeros unless some detection is correct at some
  // threshold.
  ValMetrics compute(int nc) const;

 private:
  std::vector<CorrectRow> correct_;
  std::vector<float> conf_, pred_cls_, target_cls_;
};

// 0.1 * mAP50 + 0.9 * mAP50-95 (weights [0, 0, 0.1, 0.9] of [P, R, mAP50, mAP50-95]).
double fitness(double p, double r, double map50, double map);
inline double fitness(const ValMetrics& m) { return fitness(m.mp, m.mr, m.map50, m.map); }

// The reference's table: header ('%22s' + '%11s' * 6) and rows ('%22s%11i%11i' + '%11.3g' * 4).
std::string metrics_header();
std::string metrics_row(const std::string& name, int64_t images, int64_t instances, double p,
                        double r, double map50, double map);
// The lines val prints under the header: "all" (images seen, all labels, mP, mR, mAP50,
// mAP50-95), then with per_class (the reference: --verbose, or nc < 50 outside training, and
// nc > 1) one row per class in m.ap_class, named by names[class].
std::vector<std::string> metrics_table(const ValMetrics& m, int64_t images,
                                       const std::vector<std::string>& names, bool per_class);
// Whether val prints the per-class rows, as the reference: (verbose or (nc < 50 and not
// training)) and nc > 1. The trainer validates with training set, so its per-epoch tables carry
// only "all" and the final validation of best (verbose) the classes too.
bool per_class_rows(bool verbose, bool training, int nc);

// The reference's ConfusionMatrix: (nc + 1) x (nc + 1) counts indexed [predicted][true], the last
// row and column standing for background.
class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int nc, double conf = 0.25, double iou_thres = 0.45);
  // detections (K, 6) and labels (M, 5) as match_predictions takes them.
  void process_batch(const Tensor& detections, const Tensor& labels);
  // An image without detections: every label is a missed (background) prediction.
  void process_labels_only(const std::vector<float>& label_classes);
  double at(int predicted, int truth) const { return matrix_[predicted * (nc_ + 1) + truth]; }
  int nc() const { return nc_; }
  // Per class: the diagonal, and the row sum minus the diagonal (background excluded).
  std::vector<double> true_positives() const;
  std::vector<double> false_positives() const;

 private:
  void count(int predicted, int truth);
  int nc_;
  double conf_, iou_thres_;
  std::vector<double> matrix_;
};

}  // namespace kestrel::yolo
