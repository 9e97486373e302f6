// CPU non-maximum suppression (kernels/nms.h) against a naive greedy NMS written here from the
// reference's description: candidates (obj > conf_thres, conf = obj * score, best class or every
// class above the threshold), ordered by conf descending with ties in candidate index order, cut
// at max_nms, then each candidate kept unless an already kept box of the same class (any class
// when agnostic) overlaps it with IoU > iou_thres, until max_det are kept.
//
// The inputs are chosen so that every value the kernel computes is exact or rounded once in both
// versions (scores are multiples of 1/16, boxes have integer or half-integer corners), so kept
// sets, orders and rows are compared exactly. Hand-built cases pin the tie order, the strict IoU
// and confidence thresholds, the class offsets, the filters and the limits.
#include "kernels/nms.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/support/testing.h"

using namespace kestrel;
using kernels::NmsParams;
using kernels::NmsShape;

namespace {

constexpr float kSentinel = -12345.0f;

// One output row: x1, y1, x2, y2, conf, cls.
struct Row {
  double x1, y1, x2, y2, conf, cls;
};

// The kernel on a batch, float or double predictions given as doubles; rows per image.
std::vector<std::vector<Row>> run_nms(DType t, const std::vector<double>& pred, const NmsShape& s,
                                      const NmsParams& p) {
  std::vector<float> out(static_cast<size_t>(s.batch * p.max_det * 6), kSentinel);
  std::vector<int32_t> counts(static_cast<size_t>(s.batch), -1);
  if (t == DType::F32) {
    std::vector<float> f(pred.begin(), pred.end());
    kernels::nms_cpu(t, f.data(), s, p, out.data(), counts.data());
  } else {
    kernels::nms_cpu(t, pred.data(), s, p, out.data(), counts.data());
  }
  std::vector<std::vector<Row>> rows(static_cast<size_t>(s.batch));
  for (int64_t b = 0; b < s.batch; ++b) {
    EXPECT_GE(counts[b], 0);
    EXPECT_LE(counts[b], p.max_det);
    for (int64_t k = 0; k < p.max_det; ++k) {
      const float* r = &out[static_cast<size_t>((b * p.max_det + k) * 6)];
      if (k < counts[b]) {
        rows[b].push_back({r[0], r[1], r[2], r[3], r[4], r[5]});
      } else {
        for (int c = 0; c < 6; ++c)
          EXPECT_EQ(r[c], kSentinel) << "image " << b << " row " << k << " past the count was written";
      }
    }
  }
  return rows;
}

// The naive greedy NMS, in the predictions' type T.
template <class T>
std::vector<std::vector<Row>> naive_nms(const std::vector<double>& pred_d, const NmsShape& s,
                                        const NmsParams& p) {
  const std::vector<T> pred(pred_d.begin(), pred_d.end());
  const int64_t nc = s.no - 5;
  struct Cand {
    int64_t box;
    int64_t cls;
    T conf;
  };
  std::vector<std::vector<Row>> result;
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* img = pred.data() + b * s.boxes * s.no;
    std::vector<Cand> cands;  // in candidate index order
    for (int64_t i = 0; i < s.boxes; ++i) {
      const T* r = img + i * s.no;
      const T obj = r[4];
      if (!(obj > T(p.conf_thres))) continue;
      if (p.multi_label) {
        for (int64_t k = 0; k < nc; ++k) {
          const T conf = r[5 + k] * obj;
          if (conf > T(p.conf_thres) && (p.class_allowed == nullptr || p.class_allowed[k]))
            cands.push_back({i, k, conf});
        }
      } else {
        int64_t best = 0;
        T best_conf = r[5] * obj;
        for (int64_t k = 1; k < nc; ++k)
          if (r[5 + k] * obj > best_conf) {
            best = k;
            best_conf = r[5 + k] * obj;
          }
        if (best_conf > T(p.conf_thres) && (p.class_allowed == nullptr || p.class_allowed[best]))
          cands.push_back({i, best, best_conf});
      }
    }
    // Selection: repeatedly the highest conf, the lowest candidate index among equals.
    std::vector<Cand> order;
    std::vector<char> taken(cands.size(), 0);
    while (order.size() < cands.size()) {
      size_t pick = cands.size();
      for (size_t k = 0; k < cands.size(); ++k)
        if (!taken[k] && (pick == cands.size() || cands[k].conf > cands[pick].conf)) pick = k;
      taken[pick] = 1;
      order.push_back(cands[pick]);
    }
    if (static_cast<int64_t>(order.size()) > p.max_nms) order.resize(static_cast<size_t>(p.max_nms));

    auto xyxy = [&](int64_t box, T out[4]) {
      const T* r = img + box * s.no;
      out[0] = r[0] - r[2] / 2;
      out[1] = r[1] - r[3] / 2;
      out[2] = r[0] + r[2] / 2;
      out[3] = r[1] + r[3] / 2;
    };
    auto iou = [&](int64_t a, int64_t c) {
      T x[4], y[4];
      xyxy(a, x);
      xyxy(c, y);
      const T iw = std::max(T(0), std::min(x[2], y[2]) - std::max(x[0], y[0]));
      const T ih = std::max(T(0), std::min(x[3], y[3]) - std::max(x[1], y[1]));
      const T inter = iw * ih;
      const T area_x = (x[2] - x[0]) * (x[3] - x[1]), area_y = (y[2] - y[0]) * (y[3] - y[1]);
      return inter / (area_x + area_y - inter);
    };
    std::vector<Cand> kept;
    for (const Cand& c : order) {
      if (static_cast<int64_t>(kept.size()) >= p.max_det) break;
      bool suppressed = false;
      for (const Cand& k : kept)
        if ((p.agnostic || k.cls == c.cls) && static_cast<double>(iou(k.box, c.box)) > p.iou_thres)
          suppressed = true;
      if (!suppressed) kept.push_back(c);
    }
    std::vector<Row> rows;
    for (const Cand& c : kept) {
      T q[4];
      xyxy(c.box, q);
      rows.push_back({static_cast<float>(q[0]), static_cast<float>(q[1]), static_cast<float>(q[2]),
                      static_cast<float>(q[3]), static_cast<float>(c.conf), static_cast<double>(c.cls)});
    }
    result.push_back(rows);
  }
  return result;
}

::testing::AssertionResult same_rows(const std::vector<std::vector<Row>>& got,
                                     const std::vector<std::vector<Row>>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "image counts differ";
  for (size_t b = 0; b < got.size(); ++b) {
    if (got[b].size() != want[b].size())
      return ::testing::AssertionFailure() << "image " << b << ": kept " << got[b].size()
                                           << ", naive kept " << want[b].size();
    for (size_t k = 0; k < got[b].size(); ++k) {
      const Row& g = got[b][k];
      const Row& w = want[b][k];
      if (g.x1 != w.x1 || g.y1 != w.y1 || g.x2 != w.x2 || g.y2 != w.y2 || g.conf != w.conf ||
          g.cls != w.cls)
        return ::testing::AssertionFailure()
               << "image " << b << " row " << k << ": (" << g.x1 << ", " << g.y1 << ", " << g.x2
               << ", " << g.y2 << ", " << g.conf << ", " << g.cls << ") vs naive (" << w.x1 << ", "
               << w.y1 << ", " << w.x2 << ", " << w.y2 << ", " << w.conf << ", " << w.cls << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// A box row: centre/size from the corners, then obj and the class scores.
void add_box(std::vector<double>& pred, double x1, double y1, double x2, double y2, double obj,
             const std::vector<double>& scores) {
  pred.push_back((x1 + x2) / 2);
  pred.push_back((y1 + y2) / 2);
  pred.push_back(x2 - x1);
  pred.push_back(y2 - y1);
  pred.push_back(obj);
  for (double v : scores) pred.push_back(v);
}

// Random clustered boxes with integer corners and scores in multiples of 1/16.
std::vector<double> random_pred(const NmsShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> pred;
  for (int64_t i = 0; i < s.batch * s.boxes; ++i) {
    const double x1 = static_cast<double>(rng() % 60), y1 = static_cast<double>(rng() % 60);
    const double w = static_cast<double>(1 + rng() % 40), h = static_cast<double>(1 + rng() % 40);
    std::vector<double> scores;
    for (int64_t k = 0; k < s.classes(); ++k) scores.push_back(static_cast<double>(rng() % 17) / 16);
    add_box(pred, x1, y1, x1 + w, y1 + h, static_cast<double>(rng() % 17) / 16, scores);
  }
  return pred;
}

std::vector<int> kept_classes(const std::vector<Row>& rows) {
  std::vector<int> v;
  for (const Row& r : rows) v.push_back(static_cast<int>(r.cls));
  return v;
}

std::vector<double> kept_x1(const std::vector<Row>& rows) {
  std::vector<double> v;
  for (const Row& r : rows) v.push_back(r.x1);
  return v;
}

}  // namespace

TEST(NmsCpu, RandomBatchesMatchTheNaiveGreedyNms) {
  const NmsShape s{3, 60, 5 + 4};
  int compared = 0, kept_total = 0, suppressed_somewhere = 0;
  for (DType t : {DType::F32, DType::F64}) {
    for (bool multi : {false, true}) {
      for (bool agnostic : {false, true}) {
        for (double iou : {0.45, 0.2, 0.7}) {
          NmsParams p;
          p.multi_label = multi;
          p.agnostic = agnostic;
          p.iou_thres = iou;
          p.conf_thres = 0.25;
          p.max_det = 300;
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " multi " << multi << " agnostic "
                                            << agnostic << " iou " << iou);
          const std::vector<double> pred = random_pred(s, 11 + compared);
          const auto got = run_nms(t, pred, s, p);
          const auto want = t == DType::F32 ? naive_nms<float>(pred, s, p) : naive_nms<double>(pred, s, p);
          EXPECT_TRUE(same_rows(got, want));
          for (size_t b = 0; b < got.size(); ++b) {
            kept_total += static_cast<int>(got[b].size());
            // The inputs must exercise suppression: fewer kept than candidates above conf.
            size_t candidates = 0;
            NmsParams loose = p;
            loose.iou_thres = 2.0;  // no IoU exceeds it: nothing suppressed
            candidates = run_nms(t, pred, s, loose)[b].size();
            if (got[b].size() < candidates) ++suppressed_somewhere;
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(kept_total, 100);
  EXPECT_GT(suppressed_somewhere, 30) << "the random boxes should overlap often";
}

TEST(NmsCpu, EmptyInputsKeepNothing) {
  NmsParams p;
  // No boxes at all.
  for (DType t : {DType::F32, DType::F64}) {
    auto none = run_nms(t, {}, NmsShape{2, 0, 7}, p);
    ASSERT_EQ(none.size(), 2u);
    EXPECT_TRUE(none[0].empty());
    EXPECT_TRUE(none[1].empty());
    // Boxes, but no candidate passes the confidence threshold.
    std::vector<double> pred;
    add_box(pred, 0, 0, 10, 10, 0.2, {1.0, 1.0});    // obj below 0.25
    add_box(pred, 0, 0, 10, 10, 0.5, {0.25, 0.5});  // best conf 0.25, not above 0.25
    add_box(pred, 5, 5, 10, 10, 1.0, {0.0, 0.0});
    auto low = run_nms(t, pred, NmsShape{1, 3, 7}, p);
    ASSERT_EQ(low.size(), 1u);
    EXPECT_TRUE(low[0].empty()) << dtype_name(t) << " kept " << low[0].size();
  }
  // A zero batch touches nothing.
  std::vector<float> out(6, kSentinel);
  int32_t count = -7;
  kernels::nms_cpu(DType::F32, nullptr, NmsShape{0, 5, 7}, p, out.data(), &count);
  EXPECT_EQ(count, -7);
  EXPECT_EQ(out[0], kSentinel);
}

TEST(NmsCpu, RowsHoldTheUnshiftedBoxConfidenceAndClass) {
  std::vector<double> pred;
  add_box(pred, 10, 20, 30, 60, 0.5, {0.25, 1.0, 0.5});  // best class 1, conf 0.5
  for (DType t : {DType::F32, DType::F64}) {
    NmsParams p;
    auto rows = run_nms(t, pred, NmsShape{1, 1, 8}, p);
    ASSERT_EQ(rows[0].size(), 1u);
    const Row& r = rows[0][0];
    EXPECT_EQ(r.x1, 10);
    EXPECT_EQ(r.y1, 20);
    EXPECT_EQ(r.x2, 30);
    EXPECT_EQ(r.y2, 60);
    EXPECT_EQ(r.conf, 0.5);
    EXPECT_EQ(r.cls, 1);
  }
}

TEST(NmsCpu, EqualConfidencesKeepTheCandidateIndexOrder) {
  // Four disjoint boxes: 0.5, 0.75, 0.5, 0.75 confidences. Order: box 1, box 3, box 0, box 2.
  std::vector<double> pred;
  add_box(pred, 0, 0, 10, 10, 1.0, {0.5});
  add_box(pred, 20, 0, 30, 10, 1.0, {0.75});
  add_box(pred, 40, 0, 50, 10, 1.0, {0.5});
  add_box(pred, 60, 0, 70, 10, 1.0, {0.75});
  for (DType t : {DType::F32, DType::F64}) {
    NmsParams p;
    auto rows = run_nms(t, pred, NmsShape{1, 4, 6}, p);
    EXPECT_EQ(kept_x1(rows[0]), (std::vector<double>{20, 60, 0, 40})) << dtype_name(t);
  }
  // Two identical boxes with the same conf: the first index is kept, the second suppressed.
  std::vector<double> same;
  add_box(same, 0, 0, 10, 10, 0.5, {1.0, 0.0});
  add_box(same, 0, 0, 10, 10, 1.0, {0.5, 0.0});  // conf 0.5 too, same class 0
  add_box(same, 100, 0, 110, 10, 1.0, {0.0, 0.5});
  for (DType t : {DType::F32, DType::F64}) {
    NmsParams p;
    auto rows = run_nms(t, same, NmsShape{1, 3, 7}, p);
    ASSERT_EQ(rows[0].size(), 2u);
    EXPECT_EQ(kept_x1(rows[0]), (std::vector<double>{0, 100}));
    // The first box's candidate won: its class score was 1.0 * obj 0.5; both confs are 0.5.
    EXPECT_EQ(rows[0][0].conf, 0.5);
    EXPECT_TRUE(same_rows(rows, t == DType::F32 ? naive_nms<float>(same, NmsShape{1, 3, 7}, NmsParams{})
                                                : naive_nms<double>(same, NmsShape{1, 3, 7}, NmsParams{})));
  }
  // Single-label picks the first maximum among equal class scores.
  std::vector<double> tie;
  add_box(tie, 0, 0, 10, 10, 1.0, {0.25, 0.75, 0.75, 0.5});
  auto rows = run_nms(DType::F32, tie, NmsShape{1, 1, 9}, NmsParams{});
  ASSERT_EQ(rows[0].size(), 1u);
  EXPECT_EQ(rows[0][0].cls, 1);
}

TEST(NmsCpu, IouThresholdIsStrict) {
  // Box A [0, 0, 2, 2] (area 4) and B [0, 0, 2, 1] (area 2): IoU = 2 / 4 = 0.5 exactly.
  std::vector<double> half;
  add_box(half, 0, 0, 2, 2, 1.0, {0.75});
  add_box(half, 0, 0, 2, 1, 1.0, {0.5});
  // A [0, 0, 3, 3] inside B [0, 0, 4, 5]: IoU = 9 / 20, which float rounds to 0.44999998...
  std::vector<double> nine_twentieths;
  add_box(nine_twentieths, 0, 0, 3, 3, 1.0, {0.75});
  add_box(nine_twentieths, 0, 0, 4, 5, 1.0, {0.5});
  for (DType t : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(t));
    NmsParams p;
    p.iou_thres = 0.5;  // IoU 0.5 is not above 0.5: both kept
    EXPECT_EQ(run_nms(t, half, NmsShape{1, 2, 6}, p)[0].size(), 2u);
    p.iou_thres = 0.4999;
    EXPECT_EQ(run_nms(t, half, NmsShape{1, 2, 6}, p)[0].size(), 1u);
    p.iou_thres = 0.45;  // 9/20 is not above 0.45 (float: below it)
    EXPECT_EQ(run_nms(t, nine_twentieths, NmsShape{1, 2, 6}, p)[0].size(), 2u);
    p.iou_thres = 0.4499;
    auto one = run_nms(t, nine_twentieths, NmsShape{1, 2, 6}, p);
    ASSERT_EQ(one[0].size(), 1u);
    EXPECT_EQ(one[0][0].x2, 3);  // the higher confidence box
  }
  // Touching boxes (IoU 0) never suppress, even at threshold 0, but any overlap does.
  std::vector<double> touch;
  add_box(touch, 0, 0, 10, 10, 1.0, {0.75});
  add_box(touch, 10, 0, 20, 10, 1.0, {0.5});
  add_box(touch, 19, 0, 29, 10, 1.0, {0.375});
  NmsParams zero;
  zero.iou_thres = 0.0;
  auto rows = run_nms(DType::F64, touch, NmsShape{1, 3, 6}, zero);
  EXPECT_EQ(kept_x1(rows[0]), (std::vector<double>{0, 10}));
}

TEST(NmsCpu, ClassOffsetsSeparateClassesUnlessAgnostic) {
  // The same box three times: classes 0, 2, 0.
  std::vector<double> pred;
  add_box(pred, 5, 5, 50, 50, 1.0, {0.875, 0.0, 0.0});
  add_box(pred, 5, 5, 50, 50, 1.0, {0.0, 0.0, 0.75});
  add_box(pred, 6, 5, 50, 50, 1.0, {0.625, 0.0, 0.0});
  for (DType t : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(t));
    NmsParams p;
    auto rows = run_nms(t, pred, NmsShape{1, 3, 8}, p);
    EXPECT_EQ(kept_classes(rows[0]), (std::vector<int>{0, 2}));
    // The output boxes are the unshifted ones, whatever the class.
    ASSERT_EQ(rows[0].size(), 2u);
    EXPECT_EQ(rows[0][1].x1, 5);
    EXPECT_EQ(rows[0][1].x2, 50);
    p.agnostic = true;
    rows = run_nms(t, pred, NmsShape{1, 3, 8}, p);
    EXPECT_EQ(kept_classes(rows[0]), (std::vector<int>{0}));
    // A max_wh smaller than the boxes lets the offset boxes of neighbouring classes overlap:
    // class 2's box shifted by 2 * 4 = 8 still overlaps class 0's (IoU 37*37 / (2*45*45 - 37*37)).
    p.agnostic = false;
    p.max_wh = 4.0f;
    p.iou_thres = 0.45;
    rows = run_nms(t, pred, NmsShape{1, 3, 8}, p);
    EXPECT_EQ(kept_classes(rows[0]), (std::vector<int>{0}));
  }
}

TEST(NmsCpu, MultiLabelKeepsEveryClassAboveTheThreshold) {
  std::vector<double> pred;
  add_box(pred, 0, 0, 10, 10, 0.5, {1.0, 0.25, 0.75});  // confs 0.5, 0.125, 0.375
  add_box(pred, 0, 0, 10, 10, 1.0, {0.0, 0.5, 0.0});    // conf 0.5 class 1
  for (DType t : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(t));
    NmsParams p;
    p.multi_label = true;
    auto rows = run_nms(t, pred, NmsShape{1, 2, 8}, p);
    // Candidates: (box 0, cls 0, 0.5), (box 0, cls 2, 0.375), (box 1, cls 1, 0.5);
    // 0.125 is below conf_thres. Order: idx 0 (0.5), idx 4 (0.5), idx 2 (0.375).
    EXPECT_EQ(kept_classes(rows[0]), (std::vector<int>{0, 1, 2}));
    ASSERT_EQ(rows[0].size(), 3u);
    EXPECT_EQ(rows[0][0].conf, 0.5);
    EXPECT_EQ(rows[0][1].conf, 0.5);
    EXPECT_EQ(rows[0][2].conf, 0.375);
    p.agnostic = true;  // all the same box: only the first candidate survives
    EXPECT_EQ(kept_classes(run_nms(t, pred, NmsShape{1, 2, 8}, p)[0]), (std::vector<int>{0}));
  }
}

TEST(NmsCpu, ClassFilterDropsCandidatesBeforeSuppression) {
  std::vector<double> pred;
  add_box(pred, 0, 0, 10, 10, 1.0, {0.0, 0.875});  // class 1, filtered out
  add_box(pred, 0, 0, 10, 10, 1.0, {0.5, 0.0});    // class 0: kept since its suppressor is gone
  const uint8_t allowed[2] = {1, 0};
  for (DType t : {DType::F32, DType::F64}) {
    NmsParams p;
    p.agnostic = true;
    EXPECT_EQ(kept_classes(run_nms(t, pred, NmsShape{1, 2, 7}, p)[0]), (std::vector<int>{1}));
    p.class_allowed = allowed;
    EXPECT_EQ(kept_classes(run_nms(t, pred, NmsShape{1, 2, 7}, p)[0]), (std::vector<int>{0}));
    // Single-label: a box whose best class is filtered is dropped, not given its second best.
    std::vector<double> second;
    add_box(second, 0, 0, 10, 10, 1.0, {0.5, 0.875});
    EXPECT_TRUE(run_nms(t, second, NmsShape{1, 1, 7}, p)[0].empty());
  }
}

TEST(NmsCpu, MaxDetAndMaxNmsLimitTheResult) {
  // Ten disjoint boxes with confidences 10/16, 9/16 ... 1/16 (box i: (10 - i) / 16), and one
  // box overlapping the best one.
  std::vector<double> pred;
  for (int i = 0; i < 10; ++i) add_box(pred, 20.0 * i, 0, 20.0 * i + 10, 10, 1.0, {(10 - i) / 16.0});
  add_box(pred, 0, 0, 10, 9, 1.0, {9.5 / 16});  // IoU 0.9 with box 0, conf between boxes 0 and 1
  const NmsShape s{1, 11, 6};
  for (DType t : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(t));
    NmsParams p;
    p.conf_thres = 0.0;
    auto all = run_nms(t, pred, s, p);
    EXPECT_EQ(all[0].size(), 10u);  // the overlapping one suppressed
    p.max_det = 3;
    EXPECT_EQ(kept_x1(run_nms(t, pred, s, p)[0]), (std::vector<double>{0, 20, 40}));
    // max_nms cuts the sorted candidates before suppression: the suppressed one still counts.
    p.max_det = 300;
    p.max_nms = 4;
    EXPECT_EQ(kept_x1(run_nms(t, pred, s, p)[0]), (std::vector<double>{0, 20, 40}));
    p.max_nms = 1;
    EXPECT_EQ(kept_x1(run_nms(t, pred, s, p)[0]), (std::vector<double>{0}));
    EXPECT_TRUE(same_rows(run_nms(t, pred, s, p),
                          t == DType::F32 ? naive_nms<float>(pred, s, p) : naive_nms<double>(pred, s, p)));
  }
}

TEST(NmsCpu, NanScoresMakeNoCandidate) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> pred;
  add_box(pred, 0, 0, 10, 10, 1.0, {nan, 0.75});    // torch.max gives NaN: dropped
  add_box(pred, 20, 0, 30, 10, 1.0, {0.75, nan});   // NaN after the max: still NaN, dropped
  add_box(pred, 40, 0, 50, 10, nan, {0.75, 0.75});  // NaN objectness
  add_box(pred, 60, 0, 70, 10, 1.0, {0.5, 0.25});   // the only candidate
  for (DType t : {DType::F32, DType::F64}) {
    auto rows = run_nms(t, pred, NmsShape{1, 4, 7}, NmsParams{});
    EXPECT_EQ(kept_x1(rows[0]), (std::vector<double>{60})) << dtype_name(t);
  }
}

TEST(NmsCpu, BatchImagesAreIndependent) {
  std::vector<double> pred;
  add_box(pred, 0, 0, 10, 10, 1.0, {0.75});  // image 0
  add_box(pred, 0, 0, 10, 10, 1.0, {0.5});   // image 0, suppressed
  add_box(pred, 0, 0, 10, 10, 1.0, {0.5});   // image 1: nothing above it to suppress it
  add_box(pred, 50, 0, 60, 10, 1.0, {0.25}); // image 1, conf not above 0.25
  auto rows = run_nms(DType::F32, pred, NmsShape{2, 2, 6}, NmsParams{});
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[0].size(), 1u);
  ASSERT_EQ(rows[1].size(), 1u);
  EXPECT_EQ(rows[0][0].conf, 0.75);
  EXPECT_EQ(rows[1][0].conf, 0.5);
}

TEST(NmsCpu, HalfPrecisionIsRefusedOnTheCpu) {
  std::vector<float> out(6);
  int32_t count = 0;
  std::vector<uint16_t> pred(6, 0);
  const std::string msg = kestrel::testing::error_of(
      [&] { kernels::nms_cpu(DType::F16, pred.data(), NmsShape{1, 1, 6}, NmsParams{}, out.data(), &count); });
  EXPECT_NE(msg.find("nms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32 and float64"), std::string::npos) << msg;
}
