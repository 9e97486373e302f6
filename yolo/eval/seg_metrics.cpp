#include "yolo/eval/seg_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "yolo/data/numpy_sum.h"
#include "yolo/eval/mask_ops.h"

namespace kestrel::yolo {
namespace {

double np_mean(const double* a, int64_t n, int64_t stride = 1) {
  return data::numpy_sum(a, n, stride) / static_cast<double>(n);
}

std::string row_text(const std::string& name, const char* cells) {
  return (name.size() >= 22 ? name : std::string(22 - name.size(), ' ') + name) + cells;
}

}  // namespace

std::vector<CorrectRow> match_iou_matrix(const Tensor& iou, const std::vector<float>& label_classes,
                                         const std::vector<float>& detection_classes) {
  const auto nl = static_cast<int64_t>(label_classes.size()),
             nd = static_cast<int64_t>(detection_classes.size());
  KESTREL_CHECK(iou.defined() && iou.device().is_cpu() && iou.dtype() == DType::F32 && iou.dim() == 2 &&
                    iou.size(0) == nl && iou.size(1) == nd,
                "match_iou_matrix: expected a CPU float32 (", nl, ", ", nd, ") IoU matrix for ", nl,
                " labels and ", nd, " detections, got ",
                iou.defined() ? iou.describe() : "an undefined tensor");
  const Tensor m = iou.contiguous();
  return yolo::match_iou_matrix(m.data<float>(), label_classes, detection_classes);
}

std::vector<CorrectRow> match_masks(const Tensor& detections, const Tensor& labels, const Tensor& pred_masks,
                                    const Tensor& label_masks) {
  KESTREL_CHECK(detections.defined() && detections.device().is_cpu() && detections.dtype() == DType::F32 &&
                    detections.dim() == 2 && detections.size(1) >= 6,
                "match_masks: expected detections as a CPU float32 (K, >= 6) tensor, got ",
                detections.defined() ? detections.describe() : "an undefined tensor");
  KESTREL_CHECK(labels.defined() && labels.device().is_cpu() && labels.dtype() == DType::F32 &&
                    labels.dim() == 2 && labels.size(1) == 5,
                "match_masks: expected labels as a CPU float32 (M, 5) tensor, got ",
                labels.defined() ? labels.describe() : "an undefined tensor");
  KESTREL_CHECK(pred_masks.defined() && label_masks.defined() && pred_masks.size(0) == detections.size(0) &&
                    label_masks.size(0) == labels.size(0),
                "match_masks: ", pred_masks.defined() ? pred_masks.describe() : "no", " predicted masks for ",
                detections.size(0), " detections and ", label_masks.defined() ? label_masks.describe() : "no",
                " label masks for ", labels.size(0), " labels; pass one mask each");
  const Tensor d = detections.contiguous(), l = labels.contiguous();
  std::vector<float> det_cls, label_cls;
  for (int64_t j = 0; j < d.size(0); ++j) det_cls.push_back(d.data<float>()[j * d.size(1) + 5]);
  for (int64_t i = 0; i < l.size(0); ++i) label_cls.push_back(l.data<float>()[i * 5]);
  return match_iou_matrix(mask_iou(label_masks, pred_masks), label_cls, det_cls);
}

SegMetric seg_metric(const ApResult& result) {
  SegMetric m;
  m.p = result.p;
  m.r = result.r;
  m.f1 = result.f1;
  m.all_ap = result.ap;
  const auto nc = static_cast<int64_t>(m.all_ap.size());
  KESTREL_CHECK(m.p.size() == m.all_ap.size() && m.r.size() == m.all_ap.size(), "seg_metric: ", m.p.size(),
                " precisions and ", m.r.size(), " recalls for ", nc, " classes of AP");
  for (const auto& row : m.all_ap) {
    m.ap50.push_back(row[0]);
    m.ap.push_back(np_mean(row.data(), kNumIouThresholds));
  }
  if (nc > 0) {
    const double* ap = m.all_ap.front().data();  // (nc, 10), rows contiguous
    m.mp = np_mean(m.p.data(), nc);
    m.mr = np_mean(m.r.data(), nc);
    m.map50 = np_mean(ap, nc, kNumIouThresholds);
    m.map = np_mean(ap, nc * kNumIouThresholds);
  }
  m.details = result;
  return m;
}

std::array<double, 8> SegValMetrics::mean_results() const {
  return {box.mp, box.mr, box.map50, box.map, mask.mp, mask.mr, mask.map50, mask.map};
}

std::array<double, 8> SegValMetrics::class_result(size_t i) const {
  KESTREL_CHECK(i < box.ap.size() && i < mask.ap.size(), "SegValMetrics::class_result: index ", i, " of ",
                box.ap.size(), " classes with results");
  return {box.p[i], box.r[i], box.ap50[i], box.ap[i], mask.p[i], mask.r[i], mask.ap50[i], mask.ap[i]};
}

void SegmentationStats::add(const std::vector<CorrectRow>& correct_boxes,
                            const std::vector<CorrectRow>& correct_masks, const Tensor& detections,
                            const std::vector<float>& label_classes) {
  KESTREL_CHECK(detections.defined() && detections.device().is_cpu() && detections.dtype() == DType::F32 &&
                    detections.dim() == 2 && detections.size(1) >= 6,
                "SegmentationStats::add: expected detections as a CPU float32 (K, >= 6) tensor, got ",
                detections.defined() ? detections.describe() : "an undefined tensor");
  const int64_t k = detections.size(0);
  KESTREL_CHECK(
      static_cast<int64_t>(correct_boxes.size()) == k && static_cast<int64_t>(correct_masks.size()) == k,
      "SegmentationStats::add: ", correct_boxes.size(), " box rows and ", correct_masks.size(),
      " mask rows for ", k, " detections; pass one of each per detection");
  const Tensor d = detections.contiguous();
  const float* p = d.data<float>();
  for (int64_t j = 0; j < k; ++j) {
    conf_.push_back(p[j * d.size(1) + 4]);
    pred_cls_.push_back(p[j * d.size(1) + 5]);
  }
  boxes_.insert(boxes_.end(), correct_boxes.begin(), correct_boxes.end());
  masks_.insert(masks_.end(), correct_masks.begin(), correct_masks.end());
  target_cls_.insert(target_cls_.end(), label_classes.begin(), label_classes.end());
}

SegValMetrics SegmentationStats::compute(int nc) const {
  SegValMetrics m;
  m.nt.assign(nc, 0);
  for (float c : target_cls_) {
    KESTREL_CHECK(c >= 0 && c < nc && c == std::floor(c), "SegmentationStats::compute: label class ", c,
                  " is not a class of a ", nc, "-class dataset; check the labels' class ids");
    ++m.nt[static_cast<int>(c)];
  }
  const bool any_mask_correct = std::any_of(masks_.begin(), masks_.end(), [](const CorrectRow& r) {
    return std::any_of(r.begin(), r.end(), [](bool b) { return b; });
  });
  if (any_mask_correct) {
    m.box = seg_metric(ap_per_class(boxes_, conf_, pred_cls_, target_cls_));
    m.mask = seg_metric(ap_per_class(masks_, conf_, pred_cls_, target_cls_));
    m.ap_class = m.box.details.classes;
  }
  m.maps.assign(nc, 0.0);
  for (const SegMetric* s : {&m.box, &m.mask}) {
    std::vector<double> maps(nc, s->map);
    for (size_t i = 0; i < m.ap_class.size(); ++i) maps[m.ap_class[i]] = s->ap[i];
    for (int c = 0; c < nc; ++c) m.maps[c] += maps[c];
  }
  return m;
}

double seg_fitness(const std::array<double, 8>& mean_results) {
  static constexpr std::array<double, 8> w = {0.0, 0.0, 0.1, 0.9, 0.0, 0.0, 0.1, 0.9};
  std::array<double, 8> terms{};
  for (size_t k = 0; k < 8; ++k) terms[k] = mean_results[k] * w[k];
  return data::numpy_sum(terms.data(), 8);
}

std::string seg_metrics_header() {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%22s%11s%11s%11s%11s%11s%11s%11s%11s%11s%11s", "Class", "Images",
                "Instances", "Box(P", "R", "mAP50", "mAP50-95)", "Mask(P", "R", "mAP50", "mAP50-95)");
  return buf;
}

std::string seg_metrics_row(const std::string& name, int64_t images, int64_t instances,
                            const std::array<double, 8>& v) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%11lld%11lld%11.3g%11.3g%11.3g%11.3g%11.3g%11.3g%11.3g%11.3g",
                static_cast<long long>(images), static_cast<long long>(instances), v[0], v[1], v[2], v[3],
                v[4], v[5], v[6], v[7]);
  return row_text(name, buf);
}

std::vector<std::string> seg_metrics_table(const SegValMetrics& m, int64_t images,
                                           const std::vector<std::string>& names, bool per_class) {
  int64_t labels = 0;
  for (int64_t n : m.nt) labels += n;
  std::vector<std::string> lines = {seg_metrics_row("all", images, labels, m.mean_results())};
  if (!per_class || m.nt.size() < 2) return lines;
  for (size_t i = 0; i < m.ap_class.size(); ++i) {
    const int c = m.ap_class[i];
    KESTREL_CHECK(c >= 0 && c < static_cast<int>(names.size()), "seg_metrics_table: no name for class ", c,
                  " (", names.size(), " names); pass the dataset's class names");
    lines.push_back(seg_metrics_row(names[c], images, m.nt[c], m.class_result(i)));
  }
  return lines;
}

}  // namespace kestrel::yolo
