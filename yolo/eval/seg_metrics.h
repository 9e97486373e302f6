// Segmentation metrics with the reference v7.0's definitions (segment/val.py process_batch with
// masks=True and its table; utils/segment/metrics.py ap_per_class_box_and_mask, Metric, Metrics,
// fitness): detection's ap_per_class (metrics.h) run twice over the same detections, once with
// their box matches and once with their mask matches, and numpy's arithmetic for the means.
//
// Where the reference's segmentation differs from its detection, on purpose or not, we follow it:
// - mAP50-95 is the mean of the whole (classes x 10) AP matrix (Metric.map: all_ap.mean()), not
//   the mean of the per-class means (the same number up to the summation's rounding);
// - nothing is computed (all zeros, no per-class rows) unless some MASK is correct at some
//   threshold (stats[0].any() looks at the mask matches only);
// - the per-class maps (Metrics.get_maps) are the box and mask maps added element by element;
// - fitness weighs mAP50 0.1 and mAP50-95 0.9 of both the boxes and the masks, summed.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "yolo/eval/metrics.h"

namespace kestrel::yolo {

// The reference's process_batch on an IoU matrix: for each detection and IoU threshold, whether it
// is a true positive under the one-to-one matching of match_predictions (metrics.h), with iou
// (nl, nd) float32 given (mask IoUs: mask_iou(label masks, predicted masks)) and the classes of
// the labels (nl) and detections (nd).
std::vector<CorrectRow> match_iou_matrix(const Tensor& iou, const std::vector<float>& label_classes,
                                         const std::vector<float>& detection_classes);

// process_batch(masks=True): detections (K, >= 6: x1, y1, x2, y2, conf, class), labels (M, 5:
// class, ...), the detections' masks (K, h, w) and the labels' masks (M, h, w), uint8 0/1 on the
// same grid (mask_ops.h: process_mask, label_masks).
std::vector<CorrectRow> match_masks(const Tensor& detections, const Tensor& labels, const Tensor& pred_masks,
                                    const Tensor& label_masks);

// The reference's Metric: one of boxes or masks.
struct SegMetric {
  std::vector<double> p, r, f1;                               // per ap_class entry
  std::vector<std::array<double, kNumIouThresholds>> all_ap;  // per ap_class entry
  std::vector<double> ap50, ap;                               // all_ap[:, 0] and all_ap.mean(1)
  double mp = 0, mr = 0, map50 = 0, map = 0;                  // p, r, all_ap[:, 0] and all_ap means
  ApResult details;                                           // the curves, for plots
};
// Metric.update with ap_per_class's results, and the means numpy takes of them.
SegMetric seg_metric(const ApResult& result);

struct SegValMetrics {
  SegMetric box, mask;
  std::vector<int> ap_class;  // classes with a per-class row (the labels' classes), both metrics
  std::vector<int64_t> nt;    // labels per class (nc entries)
  std::vector<double> maps;   // per class: box mAP50-95 + mask mAP50-95 (see above)
  // Metrics.mean_results(): box mp, mr, map50, map, then the mask's.
  std::array<double, 8> mean_results() const;
  // Metrics.class_result(i), i indexing ap_class: box p, r, ap50, ap, then the mask's.
  std::array<double, 8> class_result(size_t i) const;
};

// The per-image statistics segment/val.py collects, and its final computation.
class SegmentationStats {
 public:
  // One image: its detections' box and mask matches, their conf and class (detections (K, >= 6)
  // CPU float32 as NMS returns them) and the classes of its labels.
  void add(const std::vector<CorrectRow>& correct_boxes, const std::vector<CorrectRow>& correct_masks,
           const Tensor& detections, const std::vector<float>& label_classes);
  SegValMetrics compute(int nc) const;

 private:
  std::vector<CorrectRow> boxes_, masks_;
  std::vector<float> conf_, pred_cls_, target_cls_;
};

// utils/segment/metrics.fitness: weights [0, 0, 0.1, 0.9, 0, 0, 0.1, 0.9] on mean_results(),
// summed as numpy sums 8 values.
double seg_fitness(const std::array<double, 8>& mean_results);
inline double seg_fitness(const SegValMetrics& m) { return seg_fitness(m.mean_results()); }

// The reference's table: header ('%22s' + '%11s' * 10: Class, Images, Instances, Box(P, R, mAP50,
// mAP50-95), Mask(P, R, mAP50, mAP50-95)) and rows ('%22s' + '%11i' * 2 + '%11.3g' * 8).
std::string seg_metrics_header();
std::string seg_metrics_row(const std::string& name, int64_t images, int64_t instances,
                            const std::array<double, 8>& values);
// "all" (images seen, all labels, mean_results()), then with per_class (metrics.h's
// per_class_rows) one row per class of m.ap_class, named by names[class].
std::vector<std::string> seg_metrics_table(const SegValMetrics& m, int64_t images,
                                           const std::vector<std::string>& names, bool per_class);

}  // namespace kestrel::yolo
