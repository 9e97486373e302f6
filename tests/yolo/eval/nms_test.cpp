// CPU NMS against hand-built cases (each rule of the reference's non_max_suppression on its own)
// and against a literal re-statement of the reference's steps on random inputs.
#include "yolo/eval/nms.h"

#include <algorithm>
#include <random>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

// One image from rows of (cx, cy, w, h, obj, class scores...).
Tensor image(const std::vector<std::vector<float>>& rows) {
  std::vector<float> v;
  for (const auto& r : rows) v.insert(v.end(), r.begin(), r.end());
  return Tensor::from_vector(
      v, {1, static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// The reference's steps as written there: filter by objectness, conf = obj * cls, (box, class)
// pairs in row-major order or the best class, class filter, stable sort, top max_nms, class
// offsets, torchvision's loop over every candidate, then the first max_det.
std::vector<float> literal_reference(const float* x, int64_t n, int64_t no, const NmsOptions& o) {
  const int64_t nc = no - 5;
  const float thr = static_cast<float>(o.conf_thres);
  struct Det {
    float box[4], conf;
    int cls;
  };
  std::vector<Det> dets;
  for (int64_t i = 0; i < n; ++i) {
    const float* r = x + i * no;
    if (!(r[4] > thr)) continue;
    const float b[4] = {r[0] - r[2] / 2, r[1] - r[3] / 2, r[0] + r[2] / 2, r[1] + r[3] / 2};
    auto push = [&](int j, float conf) {
      if (!o.classes.empty() && std::find(o.classes.begin(), o.classes.end(), j) == o.classes.end())
        return;
      dets.push_back({{b[0], b[1], b[2], b[3]}, conf, j});
    };
    if (o.multi_label && nc > 1) {
      for (int j = 0; j < nc; ++j)
        if (r[5 + j] * r[4] > thr) push(j, r[5 + j] * r[4]);
    } else {
      int best = 0;
      for (int j = 1; j < nc; ++j)
        if (r[5 + j] * r[4] > r[5 + best] * r[4]) best = j;
      if (r[5 + best] * r[4] > thr) push(best, r[5 + best] * r[4]);
    }
  }
  std::stable_sort(dets.begin(), dets.end(),
                   [](const Det& a, const Det& b) { return a.conf > b.conf; });
  if (static_cast<int64_t>(dets.size()) > o.max_nms) dets.resize(o.max_nms);
  std::vector<bool> removed(dets.size(), false);
  std::vector<float> out;
  int64_t kept = 0;
  for (size_t a = 0; a < dets.size(); ++a) {
    if (removed[a]) continue;
    if (kept++ < o.max_det) {
      out.insert(out.end(), dets[a].box, dets[a].box + 4);
      out.push_back(dets[a].conf);
      out.push_back(static_cast<float>(dets[a].cls));
    }
    auto off = [&](const Det& d, int c) {
      return d.box[c] + (o.agnostic ? 0.0f : d.cls * 7680.0f);
    };
    const float ax1 = off(dets[a], 0), ay1 = off(dets[a], 1), ax2 = off(dets[a], 2),
                ay2 = off(dets[a], 3);
    const float aarea = (ax2 - ax1) * (ay2 - ay1);
    for (size_t b = a + 1; b < dets.size(); ++b) {
      const float bx1 = off(dets[b], 0), by1 = off(dets[b], 1), bx2 = off(dets[b], 2),
                  by2 = off(dets[b], 3);
      const float w = std::max(0.0f, std::min(ax2, bx2) - std::max(ax1, bx1));
      const float h = std::max(0.0f, std::min(ay2, by2) - std::max(ay1, by1));
      const float inter = w * h;
      const float iou = inter / (aarea + (bx2 - bx1) * (by2 - by1) - inter);
      if (static_cast<double>(iou) > o.iou_thres) removed[b] = true;
    }
  }
  return out;
}

}  // namespace

TEST(Nms, SuppressesOverlapsOfTheSameClass) {
  // A [0,0,10,10] conf .9; B [1,0,11,10] (IoU 90/110) conf .8, suppressed; C far away conf .7.
  Tensor p =
      image({{5, 5, 10, 10, 0.9f, 1.0f}, {6, 5, 10, 10, 0.8f, 1.0f}, {50, 50, 4, 4, 0.7f, 1.0f}});
  const std::vector<Tensor> out = non_max_suppression(p);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 6}));
  EXPECT_EQ(values(out[0]), (std::vector<float>{0, 0, 10, 10, 0.9f, 0, 48, 48, 52, 52, 0.7f, 0}));
}

TEST(Nms, ConfIsObjectnessTimesClassScoreAndThresholdsAreStrict) {
  NmsOptions o;
  o.conf_thres = 0.5;
  // obj .5 is not > .5; obj .9 x cls .5 = .45 fails; obj .8 x cls .75 = .6 passes.
  Tensor p =
      image({{5, 5, 2, 2, 0.5f, 1.0f}, {20, 5, 2, 2, 0.9f, 0.5f}, {40, 5, 2, 2, 0.8f, 0.75f}});
  const std::vector<float> v = values(non_max_suppression(p, o)[0]);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], 39.0f);
  EXPECT_EQ(v[4], 0.8f * 0.75f);
}

TEST(Nms, IouThresholdIsStrict) {
  // A [0,0,10,10] and B [0,0,10,5]: IoU exactly 0.5. Kept at iou_thres 0.5, suppressed at 0.49.
  Tensor p = image({{5, 5, 10, 10, 0.9f, 1.0f}, {5, 2.5f, 10, 5, 0.8f, 1.0f}});
  NmsOptions o;
  o.iou_thres = 0.5;
  EXPECT_EQ(non_max_suppression(p, o)[0].size(0), 2);
  o.iou_thres = 0.49;
  EXPECT_EQ(non_max_suppression(p, o)[0].size(0), 1);
}

TEST(Nms, ClassesAreSuppressedSeparatelyUnlessAgnostic) {
  // Two equal boxes, best classes 0 and 1.
  Tensor p = image({{5, 5, 10, 10, 0.9f, 0.9f, 0.1f}, {5, 5, 10, 10, 0.8f, 0.1f, 0.9f}});
  EXPECT_EQ(values(non_max_suppression(p)[0]),
            (std::vector<float>{0, 0, 10, 10, 0.9f * 0.9f, 0, 0, 0, 10, 10, 0.8f * 0.9f, 1}));
  NmsOptions o;
  o.agnostic = true;
  EXPECT_EQ(non_max_suppression(p, o)[0].size(0), 1);
}

TEST(Nms, MultiLabelKeepsEveryClassAboveThreshold) {
  // One box with class scores .6, .2, .9 (obj 1): classes 2 and 0 at conf_thres .5, highest
  // conf first; without multi_label only class 2.
  Tensor p = image({{5, 5, 10, 10, 1.0f, 0.6f, 0.2f, 0.9f}});
  NmsOptions o;
  o.conf_thres = 0.5;
  o.multi_label = true;
  EXPECT_EQ(values(non_max_suppression(p, o)[0]),
            (std::vector<float>{0, 0, 10, 10, 0.9f, 2, 0, 0, 10, 10, 0.6f, 0}));
  o.multi_label = false;
  EXPECT_EQ(values(non_max_suppression(p, o)[0]), (std::vector<float>{0, 0, 10, 10, 0.9f, 2}));
}

TEST(Nms, ClassFilterAppliesAfterTheBestClass) {
  // Best class 1 is filtered out; the box does not fall back to class 0.
  Tensor p = image({{5, 5, 10, 10, 1.0f, 0.6f, 0.9f}, {30, 5, 10, 10, 1.0f, 0.7f, 0.1f}});
  NmsOptions o;
  o.classes = {0};
  EXPECT_EQ(values(non_max_suppression(p, o)[0]), (std::vector<float>{25, 0, 35, 10, 0.7f, 0}));
  o.classes = {5};
  EXPECT_THROW(non_max_suppression(p, o), Error);
}

TEST(Nms, EqualScoresKeepTheLowerIndex) {
  // Two overlapping boxes with the same conf: the first one survives, whichever is larger.
  Tensor p = image({{5, 5, 10, 10, 0.8f, 1.0f}, {5, 5, 11, 11, 0.8f, 1.0f}});
  EXPECT_EQ(values(non_max_suppression(p)[0]), (std::vector<float>{0, 0, 10, 10, 0.8f, 0}));
  Tensor q = image({{5, 5, 11, 11, 0.8f, 1.0f}, {5, 5, 10, 10, 0.8f, 1.0f}});
  EXPECT_EQ(values(non_max_suppression(q)[0]),
            (std::vector<float>{-0.5f, -0.5f, 10.5f, 10.5f, 0.8f, 0}));
}

TEST(Nms, MaxDetAndMaxNmsLimit) {
  // Five disjoint boxes, conf .9 .8 .7 .6 .5.
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 5; ++i) rows.push_back({20.0f * i, 0, 5, 5, 0.9f - 0.1f * i, 1.0f});
  Tensor p = image(rows);
  NmsOptions o;
  o.max_det = 3;
  std::vector<float> v = values(non_max_suppression(p, o)[0]);
  ASSERT_EQ(v.size(), 18u);
  EXPECT_EQ(v[4], 0.9f);
  EXPECT_EQ(v[16], 0.7f);
  // max_nms cuts the candidates before suppression: only the top 2 remain.
  o = NmsOptions{};
  o.max_nms = 2;
  EXPECT_EQ(non_max_suppression(p, o)[0].size(0), 2);
}

TEST(Nms, BatchImagesAreIndependentAndEmptyImagesGiveNoRows) {
  std::vector<float> v = {5, 5, 10, 10, 0.9f, 1.0f, 6, 5, 10, 10, 0.8f, 1.0f,   // image 0
                          5, 5, 10, 10, 0.1f, 1.0f, 6, 5, 10, 10, 0.2f, 1.0f};  // image 1
  const std::vector<Tensor> out = non_max_suppression(Tensor::from_vector(v, {2, 2, 6}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].size(0), 1);
  EXPECT_EQ(out[1].shape(), (Shape{0, 6}));
}

TEST(Nms, DoubleInputAgreesWithFloatOnExactValues) {
  Tensor p =
      image({{5, 5, 10, 10, 0.5f, 1.0f}, {6, 5, 10, 10, 0.75f, 1.0f}, {50, 50, 4, 4, 0.25f, 1.0f}});
  EXPECT_EQ(values(non_max_suppression(p.to(DType::F64))[0]), values(non_max_suppression(p)[0]));
}

TEST(Nms, RefusesBadArguments) {
  Tensor p = image({{5, 5, 10, 10, 0.9f, 1.0f}});
  NmsOptions o;
  o.conf_thres = 1.5;
  EXPECT_THROW(non_max_suppression(p, o), Error);
  o = NmsOptions{};
  o.iou_thres = -0.1;
  EXPECT_THROW(non_max_suppression(p, o), Error);
  o = NmsOptions{};
  o.max_det = 0;
  EXPECT_THROW(non_max_suppression(p, o), Error);
  EXPECT_THROW(non_max_suppression(Tensor::zeros({1, 4, 5})), Error);
  EXPECT_THROW(non_max_suppression(Tensor::zeros({4, 6})), Error);
}

TEST(Nms, MatchesTheLiteralReferenceOnCrowdedRandomInputs) {
  // 400 boxes in a 100x100 area with 4 classes and scores on a coarse grid: many overlaps and
  // many equal confidences.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pos(0, 100), size(5, 40), level(1, 8);
  const int64_t n = 400, no = 9;
  std::vector<float> x(n * no);
  for (int64_t i = 0; i < n; ++i) {
    float* r = &x[i * no];
    r[0] = pos(rng), r[1] = pos(rng), r[2] = size(rng), r[3] = size(rng);
    r[4] = level(rng) / 8.0f;
    for (int j = 0; j < 4; ++j) r[5 + j] = level(rng) / 8.0f;
  }
  Tensor p = Tensor::from_vector(x, {1, n, no});
  for (int variant = 0; variant < 6; ++variant) {
    NmsOptions o;
    o.conf_thres = 0.2;
    o.iou_thres = variant % 2 ? 0.3 : 0.6;
    o.multi_label = variant >= 2;
    o.agnostic = variant == 3;
    if (variant == 4) o.classes = {1, 3};
    if (variant == 5) o.max_nms = 50, o.max_det = 7;
    SCOPED_TRACE(variant);
    const std::vector<float> want = literal_reference(x.data(), n, no, o);
    ASSERT_GT(want.size(), 6u * 3);
    EXPECT_EQ(values(non_max_suppression(p, o)[0]), want);
  }
}

TEST(Nms, ThreadPoolGivesTheSameResult) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pos(0, 60), size(5, 30), level(1, 8);
  std::vector<float> x;
  for (int i = 0; i < 6 * 200; ++i) {
    x.insert(x.end(), {float(pos(rng)), float(pos(rng)), float(size(rng)), float(size(rng))});
    for (int j = 0; j < 4; ++j) x.push_back(level(rng) / 8.0f);
  }
  Tensor p = Tensor::from_vector(x, {6, 200, 8});
  NmsOptions o;
  o.multi_label = true;
  ThreadPool pool(3);
  const std::vector<Tensor> serial = non_max_suppression(p, o);
  const std::vector<Tensor> parallel = non_max_suppression(p, o, &pool);
  ASSERT_EQ(parallel.size(), 6u);
  for (int b = 0; b < 6; ++b) {
    EXPECT_GT(serial[b].size(0), 0);
    EXPECT_EQ(values(parallel[b]), values(serial[b])) << b;
  }
}

// A segmentation model's rows end in nm mask coefficients: they take no part in the choice (the
// kept set equals that of the rows without them) and each kept row carries its own box's, times
// its objectness, as the reference's `x[:, 5:] *= x[:, 4:5]` leaves them.
TEST(Nms, MaskCoefficientsFollowTheirBox) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pos(0, 80), size(5, 30), level(1, 8);
  const int64_t n = 300, nc = 3, nm = 4, no = 5 + nc + nm;
  std::vector<float> with, without;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> r = {float(pos(rng)), float(pos(rng)), float(size(rng)), float(size(rng))};
    for (int j = 0; j < 1 + nc; ++j) r.push_back(level(rng) / 8.0f);
    without.insert(without.end(), r.begin(), r.end());
    for (int k = 0; k < nm; ++k) r.push_back(0.37f * static_cast<float>(i) + 0.25f * static_cast<float>(k) - 100.0f);
    with.insert(with.end(), r.begin(), r.end());
  }
  for (bool multi : {false, true}) {
    NmsOptions o;
    o.conf_thres = 0.2;
    o.multi_label = multi;
    o.nm = nm;
    const Tensor kept = non_max_suppression(Tensor::from_vector(with, {1, n, no}), o)[0];
    o.nm = 0;
    const Tensor plain = non_max_suppression(Tensor::from_vector(without, {1, n, no - nm}), o)[0];
    ASSERT_GT(plain.size(0), 5);
    ASSERT_EQ(kept.size(0), plain.size(0));
    ASSERT_EQ(kept.size(1), 6 + nm);
    const std::vector<float> k = values(kept), p = values(plain);
    for (int64_t r = 0; r < kept.size(0); ++r) {
      const float* row = &k[r * (6 + nm)];
      for (int c = 0; c < 6; ++c) EXPECT_EQ(row[c], p[r * 6 + c]) << r;
      // The box the row came from: its corners and confidence, and coefficients equal to that
      // box's times its objectness.
      bool found = false;
      for (int64_t i = 0; i < n && !found; ++i) {
        const float* src = &with[i * no];
        if (row[0] != src[0] - src[2] / 2 || row[3] != src[1] + src[3] / 2) continue;
        bool same = true;
        for (int c = 0; c < nm; ++c) same = same && row[6 + c] == src[5 + nc + c] * src[4];
        found = same;
      }
      EXPECT_TRUE(found) << "row " << r << ": no box with these corners and coefficients";
    }
  }
  NmsOptions bad;
  bad.nm = 4;
  EXPECT_THROW(non_max_suppression(Tensor::zeros({1, 4, 9}), bad), Error);
}
