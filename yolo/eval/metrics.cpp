#include "yolo/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "yolo/data/numpy_sum.h"
#include "yolo/eval/box_ops.h"

namespace kestrel::yolo {
namespace {

// --- numpy's arithmetic, operation for operation ------------------------------------------------
// (np.add.reduce: yolo/data/numpy_sum.h)

double np_sum(const double* a, int64_t n, int64_t stride = 1) { return data::numpy_sum(a, n, stride); }
double np_mean(const std::vector<double>& v) {
  return np_sum(v.data(), static_cast<int64_t>(v.size())) / static_cast<double>(v.size());
}

// np.linspace(0, 1, n): k * (1 / (n - 1)), the last point exactly 1.
std::vector<double> linspace01(int n) {
  const double step = 1.0 / (n - 1);
  std::vector<double> v(n);
  for (int k = 0; k < n; ++k) v[k] = static_cast<double>(k) * step + 0.0;
  v[n - 1] = 1.0;
  return v;
}

// np.interp at one point, xp non-decreasing: the last j with xp[j] <= x, its value when x sits on
// xp[j] (or past the end), else the line to j + 1.
double interp(double x, const std::vector<double>& xp, const std::vector<double>& fp, double left,
              double right) {
  const int64_t n = static_cast<int64_t>(xp.size());
  if (x > xp[n - 1]) return right;
  if (x < xp[0]) return left;
  const int64_t j = std::upper_bound(xp.begin(), xp.end(), x) - xp.begin() - 1;
  if (j == n - 1 || xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  double y = slope * (x - xp[j]) + fp[j];
  if (std::isnan(y)) {
    y = slope * (x - xp[j + 1]) + fp[j + 1];
    if (std::isnan(y) && fp[j] == fp[j + 1]) y = fp[j];
  }
  return y;
}

// np.trapz(y, x): sum of d * (y[k + 1] + y[k]) / 2.
double trapz(const std::vector<double>& y, const std::vector<double>& x) {
  std::vector<double> terms(y.size() - 1);
  for (size_t k = 0; k + 1 < y.size(); ++k) terms[k] = (x[k + 1] - x[k]) * (y[k + 1] + y[k]) / 2.0;
  return np_sum(terms.data(), static_cast<int64_t>(terms.size()));
}

// Python's round() and numpy's round(): halves to even (the default rounding mode).
double round_half_even(double x) { return std::nearbyint(x); }

// The precision envelope of a recall/precision curve with its sentinels.
struct Envelope {
  std::vector<double> mrec, mpre;
};
Envelope envelope(const std::vector<double>& recall, const std::vector<double>& precision) {
  Envelope e;
  e.mrec.push_back(0.0);
  e.mrec.insert(e.mrec.end(), recall.begin(), recall.end());
  e.mrec.push_back(1.0);
  e.mpre.push_back(1.0);
  e.mpre.insert(e.mpre.end(), precision.begin(), precision.end());
  e.mpre.push_back(0.0);
  for (size_t k = e.mpre.size() - 1; k-- > 0;) e.mpre[k] = std::max(e.mpre[k], e.mpre[k + 1]);
  return e;
}

// --- one-to-one matching ------------------------------------------------------------------------

struct Match {
  int64_t label, det;
  float iou;
};

// matches[matches[:, 2].argsort()[::-1]]: ascending (stable), then reversed.
void sort_by_iou_descending(std::vector<Match>& m) {
  std::stable_sort(m.begin(), m.end(),
                   [](const Match& a, const Match& b) { return a.iou < b.iou; });
  std::reverse(m.begin(), m.end());
}

// matches[np.unique(matches[:, col], return_index=True)[1]]: the first row of each value, in
// ascending order of the value.
std::vector<Match> first_per(const std::vector<Match>& m, bool by_det) {
  std::map<int64_t, size_t> first;
  for (size_t k = 0; k < m.size(); ++k) first.emplace(by_det ? m[k].det : m[k].label, k);
  std::vector<Match> out;
  for (const auto& [key, k] : first) out.push_back(m[k]);
  return out;
}

void check_rows(const Tensor& t, int64_t cols, const char* what, const char* layout) {
  KESTREL_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == DType::F32 && t.dim() == 2 &&
                    t.size(1) == cols && t.is_contiguous(),
                what, ": expected a contiguous CPU float32 (n, ", cols, ") tensor of ", layout,
                ", got ", t.defined() ? t.describe() : std::string("an undefined tensor"));
}

}  // namespace

const std::array<float, kNumIouThresholds>& iou_thresholds() {
  // torch.linspace in float32: start + step * i for the first half, end - step * (n - 1 - i)
  // for the second.
  static const std::array<float, kNumIouThresholds> t = [] {
    std::array<float, kNumIouThresholds> v{};
    const float start = 0.5f, end = 0.95f;
    const float step = (end - start) / static_cast<float>(kNumIouThresholds - 1);
    for (int i = 0; i < kNumIouThresholds; ++i)
      v[i] = i < kNumIouThresholds / 2 ? start + step * static_cast<float>(i)
                                       : end - step * static_cast<float>(kNumIouThresholds - 1 - i);
    return v;
  }();
  return t;
}

std::vector<CorrectRow> match_predictions(const Tensor& detections, const Tensor& labels) {
  check_rows(detections, 6, "match_predictions", "detections (x1, y1, x2, y2, conf, class)");
  check_rows(labels, 5, "match_predictions", "labels (class, x1, y1, x2, y2)");
  const int64_t nd = detections.size(0), nl = labels.size(0);
  const float* d = detections.data<float>();
  const float* l = labels.data<float>();
  std::vector<float> iou(nl * nd);
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < nd; ++j) iou[i * nd + j] = box_iou_xyxy(l + 5 * i + 1, d + 6 * j);

  std::vector<float> label_cls(nl), det_cls(nd);
  for (int64_t i = 0; i < nl; ++i) label_cls[i] = l[5 * i];
  for (int64_t j = 0; j < nd; ++j) det_cls[j] = d[6 * j + 5];
  return match_iou_matrix(iou.data(), label_cls, det_cls);
}

std::vector<CorrectRow> match_iou_matrix(const float* iou, const std::vector<float>& label_classes,
                                         const std::vector<float>& detection_classes) {
  const auto nl = static_cast<int64_t>(label_classes.size()), nd = static_cast<int64_t>(detection_classes.size());
  std::vector<CorrectRow> correct(static_cast<size_t>(nd), CorrectRow{});
  for (int t = 0; t < kNumIouThresholds; ++t) {
    std::vector<Match> m;
    for (int64_t i = 0; i < nl; ++i)
      for (int64_t j = 0; j < nd; ++j)
        if (iou[i * nd + j] >= iou_thresholds()[t] && label_classes[i] == detection_classes[j])
          m.push_back({i, j, iou[i * nd + j]});
    if (m.size() > 1) {
      sort_by_iou_descending(m);
      m = first_per(first_per(m, /*by_det=*/true), /*by_det=*/false);
    }
    for (const Match& x : m) correct[x.det][t] = true;
  }
  return correct;
}

double compute_ap(const std::vector<double>& recall, const std::vector<double>& precision) {
  const Envelope e = envelope(recall, precision);
  const std::vector<double> x = linspace01(101);
  std::vector<double> y(x.size());
  for (size_t k = 0; k < x.size(); ++k)
    y[k] = interp(x[k], e.mrec, e.mpre, e.mpre.front(), e.mpre.back());
  return trapz(y, x);
}

ApResult ap_per_class(const std::vector<CorrectRow>& tp, const std::vector<float>& conf,
                      const std::vector<float>& pred_cls, const std::vector<float>& target_cls) {
  KESTREL_CHECK(tp.size() == conf.size() && tp.size() == pred_cls.size(),
                "ap_per_class: ", tp.size(), " correct rows, ", conf.size(), " confidences and ",
                pred_cls.size(), " classes; pass one of each per detection");
  constexpr double eps = 1e-16;
  std::vector<size_t> order(tp.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return conf[a] > conf[b]; });

  std::map<float, int64_t> label_counts;  // np.unique(target_cls, return_counts=True)
  for (float c : target_cls) ++label_counts[c];
  const size_t nc = label_counts.size();
  const std::vector<double> px = linspace01(kCurvePoints);

  ApResult res;
  res.ap.assign(nc, {});
  res.p_curve.assign(nc, std::vector<double>(kCurvePoints, 0.0));
  res.r_curve = res.p_curve;
  res.pr_curve.assign(nc, {});
  std::vector<int64_t> nt;
  size_t ci = 0;
  for (const auto& [c, n_l] : label_counts) {
    res.classes.push_back(static_cast<int>(c));
    nt.push_back(n_l);
    std::vector<size_t> idx;
    for (size_t k : order)
      if (pred_cls[k] == c) idx.push_back(k);
    if (!idx.empty()) {
      std::vector<double> xp;
      for (size_t k : idx) xp.push_back(static_cast<double>(-conf[k]));
      for (int j = 0; j < kNumIouThresholds; ++j) {
        std::vector<double> recall, precision;
        int64_t tpc = 0, fpc = 0;
        for (size_t k : idx) {
          tp[k][j] ? ++tpc : ++fpc;
          recall.push_back(static_cast<double>(tpc) / (static_cast<double>(n_l) + eps));
          precision.push_back(static_cast<double>(tpc) / static_cast<double>(tpc + fpc));
        }
        if (j == 0) {
          for (int q = 0; q < kCurvePoints; ++q) {
            res.r_curve[ci][q] = interp(-px[q], xp, recall, 0.0, recall.back());
            res.p_curve[ci][q] = interp(-px[q], xp, precision, 1.0, precision.back());
          }
          const Envelope e = envelope(recall, precision);
          for (int q = 0; q < kCurvePoints; ++q)
            res.pr_curve[ci].push_back(
                interp(px[q], e.mrec, e.mpre, e.mpre.front(), e.mpre.back()));
        }
        res.ap[ci][j] = compute_ap(recall, precision);
      }
    }
    ++ci;
  }

  res.f1_curve.assign(nc, std::vector<double>(kCurvePoints, 0.0));
  std::vector<double> mean_f1(kCurvePoints, 0.0);
  for (size_t k = 0; k < nc; ++k)
    for (int q = 0; q < kCurvePoints; ++q) {
      const double p = res.p_curve[k][q], r = res.r_curve[k][q];
      res.f1_curve[k][q] = 2 * p * r / (p + r + eps);
      mean_f1[q] += res.f1_curve[k][q];
    }
  if (nc == 0) return res;
  for (double& v : mean_f1) v /= static_cast<double>(nc);
  const std::vector<double> smoothed = smooth(mean_f1, 0.1);
  const size_t best = std::max_element(smoothed.begin(), smoothed.end()) - smoothed.begin();
  for (size_t k = 0; k < nc; ++k) {
    const double p = res.p_curve[k][best], r = res.r_curve[k][best];
    const double t = round_half_even(r * static_cast<double>(nt[k]));
    res.p.push_back(p);
    res.r.push_back(r);
    res.f1.push_back(res.f1_curve[k][best]);
    res.tp.push_back(t);
    res.fp.push_back(round_half_even(t / (p + eps) - t));
  }
  return res;
}

void DetectionStats::add(const std::vector<CorrectRow>& correct, const Tensor& detections,
                         const std::vector<float>& label_classes) {
  check_rows(detections, 6, "DetectionStats::add", "detections (x1, y1, x2, y2, conf, class)");
  KESTREL_CHECK(static_cast<int64_t>(correct.size()) == detections.size(0),
                "DetectionStats::add: ", correct.size(), " correct rows for ", detections.size(0),
                " detections; pass match_predictions' result for them");
  const float* d = detections.data<float>();
  correct_.insert(correct_.end(), correct.begin(), correct.end());
  for (int64_t k = 0; k < detections.size(0); ++k) {
    conf_.push_back(d[6 * k + 4]);
    pred_cls_.push_back(d[6 * k + 5]);
  }
  target_cls_.insert(target_cls_.end(), label_classes.begin(), label_classes.end());
}

ValMetrics DetectionStats::compute(int nc) const {
  KESTREL_CHECK(nc >= 1, "DetectionStats::compute: nc must be at least 1, got ", nc);
  ValMetrics m;
  m.nt.assign(nc, 0);
  for (float c : target_cls_) {
    KESTREL_CHECK(c >= 0 && c < nc && c == std::floor(c), "DetectionStats::compute: label class ",
                  c, " is not a class of a ", nc, "-class dataset; check the labels' class ids");
    ++m.nt[static_cast<int>(c)];
  }
  const bool any_correct = std::any_of(correct_.begin(), correct_.end(), [](const CorrectRow& r) {
    return std::any_of(r.begin(), r.end(), [](bool b) { return b; });
  });
  if (any_correct) {
    m.details = ap_per_class(correct_, conf_, pred_cls_, target_cls_);
    const ApResult& d = m.details;
    m.ap_class = d.classes;
    m.p = d.p;
    m.r = d.r;
    for (const auto& row : d.ap) {
      m.ap50.push_back(row[0]);
      m.ap.push_back(np_sum(row.data(), kNumIouThresholds) / kNumIouThresholds);
    }
    m.mp = np_mean(m.p);
    m.mr = np_mean(m.r);
    m.map50 = np_mean(m.ap50);
    m.map = np_mean(m.ap);
  }
  m.maps.assign(nc, m.map);
  for (size_t i = 0; i < m.ap_class.size(); ++i) m.maps[m.ap_class[i]] = m.ap[i];
  return m;
}

double fitness(double p, double r, double map50, double map) {
  return (((-0.0 + p * 0.0) + r * 0.0) + map50 * 0.1) + map * 0.9;
}

std::string metrics_header() {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%22s%11s%11s%11s%11s%11s%11s", "Class", "Images", "Instances",
                "P", "R", "mAP50", "mAP50-95");
  return buf;
}

std::string metrics_row(const std::string& name, int64_t images, int64_t instances, double p,
                        double r, double map50, double map) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%11lld%11lld%11.3g%11.3g%11.3g%11.3g",
                static_cast<long long>(images), static_cast<long long>(instances), p, r, map50,
                map);
  std::string head = name.size() >= 22 ? name : std::string(22 - name.size(), ' ') + name;
  return head + buf;
}

bool per_class_rows(bool verbose, bool training, int nc) { return (verbose || (nc < 50 && !training)) && nc > 1; }

std::vector<std::string> metrics_table(const ValMetrics& m, int64_t images,
                                       const std::vector<std::string>& names, bool per_class) {
  int64_t labels = 0;
  for (int64_t n : m.nt) labels += n;
  std::vector<std::string> lines = {metrics_row("all", images, labels, m.mp, m.mr, m.map50, m.map)};
  if (!per_class || m.nt.size() < 2) return lines;
  for (size_t i = 0; i < m.ap_class.size(); ++i) {
    const int c = m.ap_class[i];
    KESTREL_CHECK(c >= 0 && c < static_cast<int>(names.size()), "metrics_table: no name for class ",
                  c, " (", names.size(), " names); pass the dataset's class names");
    lines.push_back(metrics_row(names[c], images, m.nt[c], m.p[i], m.r[i], m.ap50[i], m.ap[i]));
  }
  return lines;
}

ConfusionMatrix::ConfusionMatrix(int nc, double conf, double iou_thres)
    : nc_(nc), conf_(conf), iou_thres_(iou_thres) {
  KESTREL_CHECK(nc >= 1, "ConfusionMatrix: nc must be at least 1, got ", nc);
  matrix_.assign(static_cast<size_t>(nc + 1) * (nc + 1), 0.0);
}

void ConfusionMatrix::count(int predicted, int truth) {
  KESTREL_CHECK(predicted >= 0 && predicted <= nc_ && truth >= 0 && truth <= nc_,
                "ConfusionMatrix: class ", predicted == nc_ ? truth : predicted,
                " is not a class of a ", nc_, "-class dataset");
  matrix_[predicted * (nc_ + 1) + truth] += 1;
}

void ConfusionMatrix::process_labels_only(const std::vector<float>& label_classes) {
  for (float c : label_classes) count(nc_, static_cast<int>(c));
}

void ConfusionMatrix::process_batch(const Tensor& detections, const Tensor& labels) {
  check_rows(detections, 6, "ConfusionMatrix::process_batch",
             "detections (x1, y1, x2, y2, conf, class)");
  check_rows(labels, 5, "ConfusionMatrix::process_batch", "labels (class, x1, y1, x2, y2)");
  const float* all = detections.data<float>();
  const float* l = labels.data<float>();
  std::vector<const float*> d;  // detections above the confidence threshold
  for (int64_t k = 0; k < detections.size(0); ++k)
    if (all[6 * k + 4] > static_cast<float>(conf_)) d.push_back(all + 6 * k);
  const int64_t nl = labels.size(0), nd = static_cast<int64_t>(d.size());

  std::vector<Match> m;
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < nd; ++j) {
      const float iou = box_iou_xyxy(l + 5 * i + 1, d[j]);
      if (iou > static_cast<float>(iou_thres_)) m.push_back({i, j, iou});
    }
  if (m.size() > 1) {
    sort_by_iou_descending(m);
    m = first_per(m, /*by_det=*/true);
    sort_by_iou_descending(m);
    m = first_per(m, /*by_det=*/false);
  }
  const bool any = !m.empty();
  for (int64_t i = 0; i < nl; ++i) {
    const int truth = static_cast<int>(l[5 * i]);
    const auto hit = std::find_if(m.begin(), m.end(), [&](const Match& x) { return x.label == i; });
    if (any && hit != m.end())
      count(static_cast<int>(d[hit->det][5]), truth);
    else
      count(nc_, truth);
  }
  if (!any) return;
  for (int64_t j = 0; j < nd; ++j)
    if (std::none_of(m.begin(), m.end(), [&](const Match& x) { return x.det == j; }))
      count(static_cast<int>(d[j][5]), nc_);
}

std::vector<double> ConfusionMatrix::true_positives() const {
  std::vector<double> tp;
  for (int c = 0; c < nc_; ++c) tp.push_back(at(c, c));
  return tp;
}

std::vector<double> ConfusionMatrix::false_positives() const {
  std::vector<double> fp;
  for (int c = 0; c < nc_; ++c) {
    double row = 0;
    for (int t = 0; t <= nc_; ++t) row += at(c, t);
    fp.push_back(row - at(c, c));
  }
  return fp;
}

}  // namespace kestrel::yolo
