// The YOLOv5 loss on the CPU (kernels/yolo_loss.h).
//  - Per-element math: CIoU (the reference's bbox_iou(..., CIoU=True) written out in float64),
//    its gradient (alpha held constant, as under torch.no_grad there) and the raw-output box
//    term against central finite differences; BCE-with-logits with pos_weight and the focal
//    wrapper against their textbook formulas, derivatives against finite differences.
//  - Target assignment: match_slot on hand-placed targets (neighbour cells, borders, clamping,
//    anchor ratio), and target_row_valid.
//  - combine_summary / loss_grad_scales on a hand-built summary.
//  - The entry points: a hand-computed case (zero logits, one perfect match), then a two-level
//    batch against a naive loss written here (build_targets in float32 as the reference, the loss
//    in float64, last match wins on shared cells), its gradient against finite differences of the
//    naive loss (objectness targets and CIoU alphas frozen, i.e. detached as in the reference) and
//    of the kernel's own forward for the channels that do not feed those, float32 against
//    float64, and padding / invalid target rows changing nothing.
#include "kernels/yolo_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/support/testing.h"

using namespace kestrel;
using kernels::LossConfig;
using kernels::LossLevel;

namespace {

constexpr double kEps = 1e-7;
constexpr double kPi = 3.14159265358979323846;

// ---- naive float64 formulas -----------------------------------------------------------------

// bbox_iou(box1, box2, xywh=True, CIoU=True) of the reference; alpha from the boxes unless
// `frozen_alpha` is given; *alpha_out receives the alpha used.
double naive_ciou(const double p[4], const double t[4], const double* frozen_alpha = nullptr,
                  double* alpha_out = nullptr) {
  const double b1_x1 = p[0] - p[2] / 2, b1_x2 = p[0] + p[2] / 2;
  const double b1_y1 = p[1] - p[3] / 2, b1_y2 = p[1] + p[3] / 2;
  const double b2_x1 = t[0] - t[2] / 2, b2_x2 = t[0] + t[2] / 2;
  const double b2_y1 = t[1] - t[3] / 2, b2_y2 = t[1] + t[3] / 2;
  const double inter = std::max(0.0, std::min(b1_x2, b2_x2) - std::max(b1_x1, b2_x1)) *
                       std::max(0.0, std::min(b1_y2, b2_y2) - std::max(b1_y1, b2_y1));
  const double uni = p[2] * p[3] + t[2] * t[3] - inter + kEps;
  const double iou = inter / uni;
  const double cw = std::max(b1_x2, b2_x2) - std::min(b1_x1, b2_x1);
  const double ch = std::max(b1_y2, b2_y2) - std::min(b1_y1, b2_y1);
  const double c2 = cw * cw + ch * ch + kEps;
  const double rho2 =
      (std::pow(b2_x1 + b2_x2 - b1_x1 - b1_x2, 2) + std::pow(b2_y1 + b2_y2 - b1_y1 - b1_y2, 2)) / 4;
  const double v = 4 / (kPi * kPi) * std::pow(std::atan(t[2] / t[3]) - std::atan(p[2] / p[3]), 2);
  const double alpha = frozen_alpha ? *frozen_alpha : v / (v - iou + (1 + kEps));
  if (alpha_out) *alpha_out = alpha;
  return iou - (rho2 / c2 + v * alpha);
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The box of raw outputs r: xy = 2 sigmoid - 0.5, wh = (2 sigmoid)^2 * anchor; its CIoU.
double naive_box_ciou(const double r[4], double aw, double ah, const double t[4],
                      const double* frozen_alpha = nullptr, double* alpha_out = nullptr) {
  const double p[4] = {2 * sigmoid(r[0]) - 0.5, 2 * sigmoid(r[1]) - 0.5,
                       std::pow(2 * sigmoid(r[2]), 2) * aw, std::pow(2 * sigmoid(r[3]), 2) * ah};
  return naive_ciou(p, t, frozen_alpha, alpha_out);
}

// torch's BCEWithLogitsLoss(pos_weight=pw) of one element, -(pw t log p + (1 - t) log(1 - p)),
// times the reference FocalLoss's alpha_t (1 - p_t)^gamma when gamma > 0.
double naive_bce(double x, double t, double pw, double gamma) {
  const double p = sigmoid(x);
  double loss = -(pw * t * std::log(p) + (1 - t) * std::log(1 - p));
  if (gamma > 0) {
    const double p_t = t * p + (1 - t) * (1 - p);
    const double alpha_factor = t * 0.25 + (1 - t) * 0.75;
    loss *= alpha_factor * std::pow(1 - p_t, gamma);
  }
  return loss;
}

// ---- naive loss -----------------------------------------------------------------------------

struct Problem {
  LossConfig c;
  std::vector<LossLevel> levels;
  std::vector<float> targets;              // nt rows of 6
  std::vector<std::vector<double>> preds;  // per level (bs, na, ny, nx, no)
};

// One matched (target, anchor, offset) of the naive build_targets.
struct Match {
  int64_t slot, cell, cls, anchor;
  double tbox[4];
};

// build_targets in float32 for one level: slots in (offset, anchor, target) order.
std::vector<Match> naive_build_targets(const Problem& pb, int l) {
  const LossConfig& c = pb.c;
  const LossLevel& lv = pb.levels[static_cast<size_t>(l)];
  const float off[5][2] = {{0, 0}, {0.5f, 0}, {0, 0.5f}, {-0.5f, 0}, {0, -0.5f}};
  std::vector<Match> out;
  for (int o = 0; o < 5; ++o)
    for (int a = 0; a < c.na; ++a)
      for (int64_t t = 0; t < c.nt; ++t) {
        const float* r = &pb.targets[static_cast<size_t>(6 * t)];
        bool ok = true;
        for (int k = 0; k < 6; ++k) ok = ok && std::isfinite(r[k]);
        ok = ok && r[0] >= 0 && r[0] < c.bs && std::floor(r[0]) == r[0] && r[1] >= 0 && r[1] < c.nc &&
             std::floor(r[1]) == r[1] && r[2] >= 0 && r[2] <= 1 && r[3] >= 0 && r[3] <= 1 &&
             r[4] >= 0 && r[5] >= 0;
        if (!ok) continue;
        const float nx = static_cast<float>(lv.nx), ny = static_cast<float>(lv.ny);
        const float gx = r[2] * nx, gy = r[3] * ny, gw = r[4] * nx, gh = r[5] * ny;
        const float rw = gw / lv.anchors[2 * a], rh = gh / lv.anchors[2 * a + 1];
        if (!(std::max(std::max(rw, 1 / rw), std::max(rh, 1 / rh)) < c.anchor_t)) continue;
        const float gxi = nx - gx, gyi = ny - gy;
        bool take = true;
        if (o == 1) take = std::fmod(gx, 1.0f) < 0.5f && gx > 1;
        if (o == 2) take = std::fmod(gy, 1.0f) < 0.5f && gy > 1;
        if (o == 3) take = std::fmod(gxi, 1.0f) < 0.5f && gxi > 1;
        if (o == 4) take = std::fmod(gyi, 1.0f) < 0.5f && gyi > 1;
        if (!take) continue;
        int64_t gi = static_cast<int64_t>(gx - off[o][0]), gj = static_cast<int64_t>(gy - off[o][1]);
        gi = std::clamp<int64_t>(gi, 0, lv.nx - 1);
        gj = std::clamp<int64_t>(gj, 0, lv.ny - 1);
        Match m;
        m.slot = (o * c.na + a) * c.nt + t;
        m.cell = ((static_cast<int64_t>(r[0]) * c.na + a) * lv.ny + gj) * lv.nx + gi;
        m.cls = static_cast<int64_t>(r[1]);
        m.anchor = a;
        m.tbox[0] = gx - static_cast<float>(gi);
        m.tbox[1] = gy - static_cast<float>(gj);
        m.tbox[2] = gw;
        m.tbox[3] = gh;
        out.push_back(m);
      }
  return out;
}

// Objectness targets and CIoU alphas, per level (tobj per cell; alpha per match).
struct Frozen {
  std::vector<std::vector<double>> tobj, alpha;
};

struct NaiveLoss {
  double loss = 0, box = 0, obj = 0, cls = 0;
  std::vector<double> sums;  // per level: box, cls, count, obj
  Frozen frozen;
};

// The loss in float64. With `frozen`, its tobj and alphas replace the computed ones (the
// gradient the kernel computes is the gradient of this function with them held fixed).
NaiveLoss naive_loss(const Problem& pb, const std::vector<std::vector<double>>& preds,
                     const Frozen* frozen = nullptr) {
  const LossConfig& c = pb.c;
  NaiveLoss out;
  const int64_t no = c.no();
  for (int l = 0; l < static_cast<int>(pb.levels.size()); ++l) {
    const LossLevel& lv = pb.levels[static_cast<size_t>(l)];
    const std::vector<double>& pred = preds[static_cast<size_t>(l)];
    const int64_t cells = lv.cells(c);
    std::vector<double> tobj(static_cast<size_t>(cells), 0.0), alphas;
    double box = 0, cls = 0, n = 0, obj = 0;
    const std::vector<Match> matches = naive_build_targets(pb, l);
    for (size_t m = 0; m < matches.size(); ++m) {
      const Match& mt = matches[m];
      const double* x = &pred[static_cast<size_t>(mt.cell * no)];
      double alpha = 0;
      const double ciou =
          naive_box_ciou(x, lv.anchors[2 * mt.anchor], lv.anchors[2 * mt.anchor + 1], mt.tbox,
                         frozen ? &frozen->alpha[static_cast<size_t>(l)][m] : nullptr, &alpha);
      alphas.push_back(alpha);
      box += 1 - ciou;
      n += 1;
      if (c.nc > 1)
        for (int64_t k = 0; k < c.nc; ++k)
          cls += naive_bce(x[5 + k], k == mt.cls ? c.cp : c.cn, c.cls_pw, c.fl_gamma);
      tobj[static_cast<size_t>(mt.cell)] = std::max(ciou, 0.0);  // slot order: the last one wins
    }
    if (frozen) tobj = frozen->tobj[static_cast<size_t>(l)];
    for (int64_t cell = 0; cell < cells; ++cell)
      obj += naive_bce(pred[static_cast<size_t>(cell * no + 4)], tobj[static_cast<size_t>(cell)],
                       c.obj_pw, c.fl_gamma);
    out.sums.insert(out.sums.end(), {box, cls, n, obj});
    if (n > 0) {
      out.box += box / n;
      if (c.nc > 1) out.cls += cls / (n * static_cast<double>(c.nc));
    }
    out.obj += lv.balance * obj / static_cast<double>(cells);
    out.frozen.tobj.push_back(tobj);
    out.frozen.alpha.push_back(alphas);
  }
  out.box *= c.box_gain;
  out.obj *= c.obj_gain;
  out.cls *= c.cls_gain;
  out.loss = (out.box + out.obj + out.cls) * static_cast<double>(c.bs);
  return out;
}

// ---- running the kernel ---------------------------------------------------------------------

struct LevelStore {
  std::vector<int32_t> slot_cell, slot_cls, sorted_cell, sorted_slot;
  std::vector<float> slot_tbox;
  std::vector<double> slot_iou, slot_dbox, tobj;
};

struct KernelRun {
  std::vector<double> summary;
  double total = 0;
  std::vector<LevelStore> stores;
  std::vector<std::vector<double>> grads;  // per level, as doubles
};

// Forward (and backward with d loss = grad_total) in float or double.
KernelRun run_kernel(const Problem& pb, const std::vector<std::vector<double>>& preds, DType t,
                     double grad_total = 1.0, bool backward = true) {
  const LossConfig& c = pb.c;
  const int nl = static_cast<int>(pb.levels.size());
  KernelRun run;
  run.stores.resize(static_cast<size_t>(nl));
  std::vector<std::vector<float>> pf(static_cast<size_t>(nl));
  std::vector<kernels::LossLevelBuffers<double>> bufs(static_cast<size_t>(nl));
  const int64_t S = c.slots();
  for (int l = 0; l < nl; ++l) {
    LevelStore& st = run.stores[static_cast<size_t>(l)];
    const int64_t C = pb.levels[static_cast<size_t>(l)].cells(c);
    st.slot_cell.assign(static_cast<size_t>(S), -5);
    st.slot_cls.assign(static_cast<size_t>(S), -5);
    st.sorted_cell.assign(static_cast<size_t>(S), -5);
    st.sorted_slot.assign(static_cast<size_t>(S), -5);
    st.slot_tbox.assign(static_cast<size_t>(4 * S), -5.0f);
    st.slot_iou.assign(static_cast<size_t>(S), -5.0);
    st.slot_dbox.assign(static_cast<size_t>(4 * S), -5.0);
    st.tobj.assign(static_cast<size_t>(C), -5.0);
    auto& b = bufs[static_cast<size_t>(l)];
    pf[static_cast<size_t>(l)].assign(preds[static_cast<size_t>(l)].begin(), preds[static_cast<size_t>(l)].end());
    b.pred = t == DType::F32 ? static_cast<const void*>(pf[static_cast<size_t>(l)].data())
                             : static_cast<const void*>(preds[static_cast<size_t>(l)].data());
    b.slot_cell = st.slot_cell.data();
    b.slot_cls = st.slot_cls.data();
    b.slot_tbox = st.slot_tbox.data();
    b.slot_iou = st.slot_iou.data();
    b.slot_dbox = st.slot_dbox.data();
    b.sorted_cell = st.sorted_cell.data();
    b.sorted_slot = st.sorted_slot.data();
    b.tobj = st.tobj.data();
  }
  run.summary.assign(kernels::kSummarySize, -5.0);
  double total_d = -5;
  float total_f = -5;
  kernels::yolo_loss_forward_cpu(t, c, pb.levels.data(), bufs.data(), nl, pb.targets.data(),
                                 run.summary.data(), t == DType::F32 ? static_cast<void*>(&total_f)
                                                                     : static_cast<void*>(&total_d));
  run.total = t == DType::F32 ? total_f : total_d;
  if (!backward) return run;
  std::vector<std::vector<double>> gd(static_cast<size_t>(nl));
  std::vector<std::vector<float>> gf(static_cast<size_t>(nl));
  std::vector<void*> gptr;
  for (int l = 0; l < nl; ++l) {
    const size_t n = preds[static_cast<size_t>(l)].size();
    gd[static_cast<size_t>(l)].assign(n, std::numeric_limits<double>::quiet_NaN());
    gf[static_cast<size_t>(l)].assign(n, std::numeric_limits<float>::quiet_NaN());
    gptr.push_back(t == DType::F32 ? static_cast<void*>(gf[static_cast<size_t>(l)].data())
                                   : static_cast<void*>(gd[static_cast<size_t>(l)].data()));
  }
  kernels::yolo_loss_backward_cpu(t, c, pb.levels.data(), bufs.data(), nl, run.summary.data(),
                                  grad_total, gptr.data());
  for (int l = 0; l < nl; ++l)
    run.grads.push_back(t == DType::F32 ? std::vector<double>(gf[static_cast<size_t>(l)].begin(),
                                                              gf[static_cast<size_t>(l)].end())
                                        : gd[static_cast<size_t>(l)]);
  return run;
}

LossLevel make_level(int64_t ny, int64_t nx, std::vector<float> anchors, double balance) {
  LossLevel lv;
  lv.ny = ny;
  lv.nx = nx;
  for (size_t k = 0; k < anchors.size(); ++k) lv.anchors[k] = anchors[k];
  lv.balance = balance;
  return lv;
}

// Two levels (4x6 and 2x3 grids), two images, two anchors, three classes; random targets plus
// a hand-placed pair that shares cells, random logits in [-2, 2].
Problem two_level_problem(double fl_gamma) {
  Problem pb;
  LossConfig& c = pb.c;
  c.bs = 2;
  c.na = 2;
  c.nc = 3;
  c.cp = 0.95;
  c.cn = 0.05;
  c.cls_pw = 1.5;
  c.obj_pw = 0.75;
  c.fl_gamma = fl_gamma;
  c.box_gain = 0.05;
  c.obj_gain = 1.3;
  c.cls_gain = 0.4;
  pb.levels.push_back(make_level(4, 6, {1.25f, 1.625f, 2.0f, 3.75f}, 4.0));
  pb.levels.push_back(make_level(2, 3, {1.875f, 1.8125f, 0.875f, 1.4375f}, 1.0));
  pb.targets = {
      0, 1, 0.30f, 0.60f, 0.25f, 0.30f,  //
      0, 0, 0.32f, 0.62f, 0.40f, 0.45f,  // near the first: shares its cells
      1, 2, 0.71f, 0.18f, 0.20f, 0.55f,  //
      1, 0, 0.05f, 0.93f, 0.15f, 0.12f,  // near a corner
      0, 2, 0.55f, 0.40f, 0.60f, 0.35f,  //
  };
  c.nt = static_cast<int64_t>(pb.targets.size() / 6);
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (const LossLevel& lv : pb.levels) {
    std::vector<double> p(static_cast<size_t>(lv.cells(c) * c.no()));
    for (double& v : p) v = u(rng);
    pb.preds.push_back(p);
  }
  return pb;
}

::testing::AssertionResult near_rel(double got, double want, double rtol, double atol = 0) {
  if (std::abs(got - want) <= atol + rtol * std::abs(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " vs " << want << " (diff " << got - want << ")";
}

}  // namespace

// ---- per-element math ---------------------------------------------------------------------------

namespace {
// (p, t) pairs in xywh: overlapping, disjoint, p containing t, t partly inside p; no coordinate
// ties (where min/max have no derivative).
const double kBoxPairs[][2][4] = {
    {{0.3, 0.4, 1.2, 0.8}, {0.5, 0.2, 1.0, 1.5}},
    {{0.0, 0.0, 1.0, 1.0}, {3.0, 2.0, 0.5, 2.0}},
    {{0.0, 0.0, 4.0, 3.0}, {0.2, -0.1, 1.0, 0.7}},
    {{1.0, 1.0, 2.0, 2.0}, {1.7, 0.4, 1.3, 2.6}},
    {{5.2, 3.1, 0.4, 2.2}, {5.0, 3.3, 0.9, 1.7}},
};
}  // namespace

TEST(YoloLossMath, CiouMatchesTheReferenceFormula) {
  for (const auto& pair : kBoxPairs) {
    double g[4];
    const double got = kernels::ciou_with_grad<double>(pair[0], pair[1], g);
    EXPECT_TRUE(near_rel(got, naive_ciou(pair[0], pair[1]), 0, 1e-14));
    float pf[4], tf[4], gf[4];
    for (int k = 0; k < 4; ++k) {
      pf[k] = static_cast<float>(pair[0][k]);
      tf[k] = static_cast<float>(pair[1][k]);
    }
    EXPECT_TRUE(near_rel(kernels::ciou_with_grad<float>(pf, tf, gf), naive_ciou(pair[0], pair[1]), 0, 2e-6));
  }
  // By hand: identical boxes give IoU 4 / (4 + eps) and no penalty; concentric boxes of the same
  // aspect give their plain IoU minus nothing; disjoint boxes a negative CIoU.
  const double same[4] = {0, 0, 2, 2};
  double g[4];
  EXPECT_DOUBLE_EQ(kernels::ciou_with_grad<double>(same, same, g), 4 / (4 + kEps));
  const double big[4] = {0, 0, 4, 4};
  // IoU = 4 / 16; rho = 0; v = 0.
  EXPECT_DOUBLE_EQ(kernels::ciou_with_grad<double>(same, big, g), 4 / (16 + kEps));
  // Side by side unit squares one apart: IoU 0, c = 3 x 1, rho^2 = 4: CIoU = -4 / 10.
  const double left[4] = {0, 0, 1, 1}, right[4] = {2, 0, 1, 1};
  EXPECT_NEAR(kernels::ciou_with_grad<double>(left, right, g), -4.0 / 10.0, 1e-7);
  // No overlap and equal aspects: only the distance term moves. With p's x: rho^2 = (2 - x)^2,
  // c^2 = (2.5 - (x - 0.5))^2 + 1, so d CIoU / dx = -(-4 * 10 - 4 * (-6)) / 100 = 0.16.
  EXPECT_NEAR(g[0], 0.16, 1e-6);
  EXPECT_NEAR(g[1], 0.0, 1e-12);
}

TEST(YoloLossMath, CiouGradientMatchesFiniteDifferencesWithAlphaHeld) {
  const double h = 1e-6;
  for (const auto& pair : kBoxPairs) {
    double g[4], alpha = 0;
    kernels::ciou_with_grad<double>(pair[0], pair[1], g);
    naive_ciou(pair[0], pair[1], nullptr, &alpha);
    for (int k = 0; k < 4; ++k) {
      double hi[4], lo[4];
      std::copy(pair[0], pair[0] + 4, hi);
      std::copy(pair[0], pair[0] + 4, lo);
      hi[k] += h;
      lo[k] -= h;
      const double fd = (naive_ciou(hi, pair[1], &alpha) - naive_ciou(lo, pair[1], &alpha)) / (2 * h);
      EXPECT_TRUE(near_rel(g[k], fd, 1e-6, 1e-9)) << "component " << k << " of pair p=(" << pair[0][0]
                                                   << ", " << pair[0][1] << ", ...)";
    }
  }
}

TEST(YoloLossMath, BoxTermOfRawOutputsMatchesFiniteDifferences) {
  const double h = 1e-6;
  const double raws[][4] = {{0.3, -0.7, 0.2, -0.4}, {-1.5, 1.1, -0.9, 0.8}, {2.0, 0.1, 1.3, 1.7}};
  const double aw = 1.5, ah = 2.25;
  const float tb[4] = {0.6f, 0.3f, 2.0f, 1.5f};
  const double t[4] = {0.6f, 0.3f, 2.0f, 1.5f};
  for (const auto& r : raws) {
    double draw[4], alpha = 0;
    const double ciou = kernels::box_ciou<double>(r, aw, ah, tb, draw);
    EXPECT_TRUE(near_rel(ciou, naive_box_ciou(r, aw, ah, t, nullptr, &alpha), 0, 1e-13));
    for (int k = 0; k < 4; ++k) {
      double hi[4], lo[4];
      std::copy(r, r + 4, hi);
      std::copy(r, r + 4, lo);
      hi[k] += h;
      lo[k] -= h;
      const double fd =
          (naive_box_ciou(hi, aw, ah, t, &alpha) - naive_box_ciou(lo, aw, ah, t, &alpha)) / (2 * h);
      EXPECT_TRUE(near_rel(draw[k], fd, 1e-6, 1e-9)) << "raw component " << k;
    }
  }
}

TEST(YoloLossMath, BceWithLogitsMatchesTorchAndItsDerivative) {
  const double h = 1e-6;
  int checked = 0;
  for (double x : {-4.0, -0.5, 0.0, 0.2, 3.0}) {
    for (double t : {0.0, 1.0, 0.3, 0.95}) {
      for (double pw : {1.0, 2.5, 0.75}) {
        for (double gamma : {0.0, 1.5, 2.0}) {
          SCOPED_TRACE(::testing::Message() << "x " << x << " t " << t << " pw " << pw << " gamma " << gamma);
          double dx = 0;
          const double got = kernels::bce_term<double>(x, t, pw, gamma, &dx);
          EXPECT_TRUE(near_rel(got, naive_bce(x, t, pw, gamma), 1e-13, 1e-15));
          const double fd = (naive_bce(x + h, t, pw, gamma) - naive_bce(x - h, t, pw, gamma)) / (2 * h);
          EXPECT_TRUE(near_rel(dx, fd, 1e-6, 1e-9));
          float dxf = 0;
          const float gotf = kernels::bce_term<float>(static_cast<float>(x), static_cast<float>(t),
                                                       static_cast<float>(pw), static_cast<float>(gamma), &dxf);
          EXPECT_TRUE(near_rel(gotf, got, 1e-5, 1e-6));
          EXPECT_TRUE(near_rel(dxf, dx, 1e-5, 1e-6));
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 180);
  // By hand: x = 0 gives (1 + (pw - 1) t) log 2 and d/dx = (1 + (pw - 1) t) / 2 - pw t.
  double dx = 0;
  EXPECT_DOUBLE_EQ(kernels::bce_term<double>(0.0, 0.25, 3.0, 0.0, &dx), 1.5 * std::log(2.0));
  EXPECT_DOUBLE_EQ(dx, 0.75 - 0.75);
  // Focal at x = 0, t = 1: p_t = 1/2, alpha_t = 0.25: 0.25 * 0.5^2 * log 2.
  EXPECT_DOUBLE_EQ(kernels::bce_term<double>(0.0, 1.0, 1.0, 2.0, &dx), 0.25 * 0.25 * std::log(2.0));
  // Large logits stay finite: softplus without overflow.
  EXPECT_NEAR(kernels::bce_term<double>(100.0, 0.0, 1.0, 0.0, &dx), 100.0, 1e-12);
  EXPECT_NEAR(dx, 1.0, 1e-12);
  EXPECT_NEAR(kernels::bce_term<double>(-100.0, 1.0, 2.0, 0.0, &dx), 200.0, 1e-12);
  EXPECT_NEAR(dx, -2.0, 1e-12);
  float dxf = 0;
  EXPECT_EQ(kernels::bce_term<float>(-800.0f, 0.0f, 1.0f, 0.0f, &dxf), 0.0f);
  EXPECT_EQ(dxf, 0.0f);
  EXPECT_TRUE(std::isfinite(kernels::bce_term<float>(200.0f, 1.0f, 1.0f, 1.5f, &dxf)));
  EXPECT_TRUE(std::isfinite(dxf));
}

TEST(YoloLossMath, MinMaxGradientSharesSplitTies) {
  EXPECT_EQ(kernels::dmin_da(1.0, 2.0), 1.0);
  EXPECT_EQ(kernels::dmin_da(2.0, 1.0), 0.0);
  EXPECT_EQ(kernels::dmin_da(1.5, 1.5), 0.5);
  EXPECT_EQ(kernels::dmax_da(1.0, 2.0), 0.0);
  EXPECT_EQ(kernels::dmax_da(2.0, 1.0), 1.0);
  EXPECT_EQ(kernels::dmax_da(1.5, 1.5), 0.5);
}

// ---- target assignment --------------------------------------------------------------------------

TEST(YoloLossMatch, CentreAndNeighbourCellsByHand) {
  LossConfig c;
  c.bs = 2;
  c.na = 2;
  c.nc = 3;
  c.nt = 1;
  const LossLevel lv = make_level(4, 4, {1, 1, 3.9f, 3.9f}, 1.0);
  // Image 1, class 2 at (0.3, 0.6) size 0.25: grid (1.2, 2.4), size 1. Fractions 0.2 and 0.4:
  // left and up neighbours taken; right/down fractions 0.8 and 0.6 are not.
  const float row[6] = {1, 2, 0.3f, 0.6f, 0.25f, 0.25f};
  int32_t cls = -1;
  float tb[4];
  auto cell = [&](int64_t b, int64_t a, int64_t gj, int64_t gi) {
    return static_cast<int32_t>(((b * c.na + a) * lv.ny + gj) * lv.nx + gi);
  };
  const float gx = 0.3f * 4.0f, gy = 0.6f * 4.0f;
  EXPECT_EQ(kernels::match_slot(row, 0, 0, lv, c, &cls, tb), cell(1, 0, 2, 1));
  EXPECT_EQ(cls, 2);
  EXPECT_EQ(tb[0], gx - 1.0f);
  EXPECT_EQ(tb[1], gy - 2.0f);
  EXPECT_EQ(tb[2], 1.0f);
  EXPECT_EQ(tb[3], 1.0f);
  EXPECT_EQ(kernels::match_slot(row, 1, 0, lv, c, &cls, tb), cell(1, 0, 2, 0));  // left
  EXPECT_EQ(tb[0], gx);  // relative to the neighbour: 1.2
  EXPECT_EQ(tb[1], gy - 2.0f);
  EXPECT_EQ(kernels::match_slot(row, 2, 0, lv, c, &cls, tb), cell(1, 0, 1, 1));  // up
  EXPECT_EQ(tb[0], gx - 1.0f);
  EXPECT_EQ(tb[1], gy - 1.0f);  // 1.4
  EXPECT_EQ(kernels::match_slot(row, 3, 0, lv, c, &cls, tb), kernels::kNoCell);
  EXPECT_EQ(kernels::match_slot(row, 4, 0, lv, c, &cls, tb), kernels::kNoCell);
  // Anchor 1 (3.9 x 3.9): ratio 3.9 < anchor_t 4 matches; at anchor_t 3.5 it does not.
  EXPECT_EQ(kernels::match_slot(row, 0, 1, lv, c, &cls, tb), cell(1, 1, 2, 1));
  LossConfig strict = c;
  strict.anchor_t = 3.5f;
  EXPECT_EQ(kernels::match_slot(row, 0, 1, lv, strict, &cls, tb), kernels::kNoCell);

  // Near the left border: grid x 0.4 has fraction < 0.5 but is not beyond cell 1: no left
  // neighbour. Near the right border: 4 - 3.6 = 0.4, likewise no right neighbour.
  const float near_left[6] = {0, 0, 0.1f, 0.5f, 0.25f, 0.25f};
  EXPECT_EQ(kernels::match_slot(near_left, 1, 0, lv, c, &cls, tb), kernels::kNoCell);
  const float near_right[6] = {0, 0, 0.9f, 0.5f, 0.25f, 0.25f};
  EXPECT_EQ(kernels::match_slot(near_right, 3, 0, lv, c, &cls, tb), kernels::kNoCell);
  EXPECT_EQ(kernels::match_slot(near_right, 0, 0, lv, c, &cls, tb), cell(0, 0, 2, 3));
  // x = 1 lands on grid 4: the cell is clamped to 3 and the box is relative to the clamped cell.
  const float edge[6] = {0, 0, 1.0f, 1.0f, 0.25f, 0.25f};
  EXPECT_EQ(kernels::match_slot(edge, 0, 0, lv, c, &cls, tb), cell(0, 0, 3, 3));
  EXPECT_EQ(tb[0], 1.0f);
  EXPECT_EQ(tb[1], 1.0f);
  // Its left neighbour: fraction 0 < 0.5 and 4 > 1: cell int(4 - 0.5) = 3, the same cell.
  EXPECT_EQ(kernels::match_slot(edge, 1, 0, lv, c, &cls, tb), cell(0, 0, 3, 3));
  EXPECT_EQ(kernels::match_slot(edge, 3, 0, lv, c, &cls, tb), kernels::kNoCell);
}

TEST(YoloLossMatch, TargetRowValidity) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto valid = [](std::vector<float> r) { return kernels::target_row_valid(r.data(), 2, 3); };
  EXPECT_TRUE(valid({0, 0, 0.5f, 0.5f, 0.1f, 0.1f}));
  EXPECT_TRUE(valid({1, 2, 0, 1, 0, 0}));
  EXPECT_FALSE(valid({2, 0, 0.5f, 0.5f, 0.1f, 0.1f}));   // image out of range
  EXPECT_FALSE(valid({-1, 0, 0.5f, 0.5f, 0.1f, 0.1f}));  // padding
  EXPECT_FALSE(valid({0.5f, 0, 0.5f, 0.5f, 0.1f, 0.1f}));
  EXPECT_FALSE(valid({0, 3, 0.5f, 0.5f, 0.1f, 0.1f}));  // class out of range
  EXPECT_FALSE(valid({0, 1.5f, 0.5f, 0.5f, 0.1f, 0.1f}));
  EXPECT_FALSE(valid({0, 0, 1.01f, 0.5f, 0.1f, 0.1f}));
  EXPECT_FALSE(valid({0, 0, 0.5f, -0.01f, 0.1f, 0.1f}));
  EXPECT_FALSE(valid({0, 0, 0.5f, 0.5f, -0.1f, 0.1f}));
  EXPECT_FALSE(valid({0, 0, 0.5f, 0.5f, 0.1f, nan}));
  EXPECT_FALSE(valid({0, 0, 0.5f, 0.5f, inf, 0.1f}));
  const float padding[6] = {-1, 0, 0, 0, 0, 0};
  EXPECT_TRUE(kernels::target_row_padding(padding));
  const float real[6] = {0, 0, 0, 0, 0, 0};
  EXPECT_FALSE(kernels::target_row_padding(real));
}

// ---- summary arithmetic -------------------------------------------------------------------------

TEST(YoloLossSummary, CombineAndGradScalesByHand) {
  LossConfig c;
  c.bs = 2;
  c.na = 1;
  c.nc = 3;
  c.box_gain = 0.05;
  c.obj_gain = 1.0;
  c.cls_gain = 0.5;
  const LossLevel levels[2] = {make_level(2, 2, {1, 1}, 4.0), make_level(1, 1, {1, 1}, 1.0)};
  // Level 0: box 2, cls 3, 4 matches, obj 8 over 8 cells; level 1: no match, obj 5 over 2 cells.
  std::vector<double> sm(kernels::kSummarySize, 0.0);
  sm[0] = 2;
  sm[1] = 3;
  sm[2] = 4;
  sm[3] = 8;
  sm[4] = 0;
  sm[5] = 0;
  sm[6] = 0;
  sm[7] = 5;
  const double total = kernels::combine_summary(sm.data(), c, levels, 2);
  EXPECT_DOUBLE_EQ(sm[kernels::kSummaryBox], 0.05 * (2.0 / 4));
  EXPECT_DOUBLE_EQ(sm[kernels::kSummaryObj], 4.0 * (8.0 / 8) + 1.0 * (5.0 / 2));
  EXPECT_DOUBLE_EQ(sm[kernels::kSummaryCls], 0.5 * (3.0 / (4 * 3)));
  EXPECT_DOUBLE_EQ(total, (0.025 + 6.5 + 0.125) * 2);
  EXPECT_EQ(sm[kernels::kSummaryTotal], total);

  const auto s0 = kernels::loss_grad_scales(sm.data(), c, levels[0], 0, 3.0);
  EXPECT_DOUBLE_EQ(s0.box, -0.05 * 2 * 3.0 / 4);
  EXPECT_DOUBLE_EQ(s0.cls, 0.5 * 2 * 3.0 / (4 * 3));
  EXPECT_DOUBLE_EQ(s0.obj, 1.0 * 4.0 * 2 * 3.0 / 8);
  const auto s1 = kernels::loss_grad_scales(sm.data(), c, levels[1], 1, 3.0);
  EXPECT_EQ(s1.box, 0.0);
  EXPECT_EQ(s1.cls, 0.0);
  EXPECT_DOUBLE_EQ(s1.obj, 1.0 * 1.0 * 2 * 3.0 / 2);

  // One class: no class loss at all.
  c.nc = 1;
  kernels::combine_summary(sm.data(), c, levels, 2);
  EXPECT_EQ(sm[kernels::kSummaryCls], 0.0);
  EXPECT_EQ(kernels::loss_grad_scales(sm.data(), c, levels[0], 0, 1.0).cls, 0.0);
}

// ---- entry points -------------------------------------------------------------------------------

TEST(YoloLossCpu, ZeroLogitsAndOnePerfectMatchByHand) {
  // One image, one anchor (1 x 1), two classes, a 4x4 grid; the target at grid (1.5, 2.5) of size
  // 1 sits at its cell's centre (no neighbour: fractions are exactly 0.5). With zero logits the
  // predicted box is (0.5, 0.5, 1, 1): exactly the target, so CIoU = 1 / (1 + 1e-7), and every
  // BCE is at x = 0.
  Problem pb;
  LossConfig& c = pb.c;
  c.bs = 1;
  c.na = 1;
  c.nc = 2;
  c.nt = 1;
  pb.levels.push_back(make_level(4, 4, {1, 1}, 1.0));
  pb.targets = {0, 1, 0.375f, 0.625f, 0.25f, 0.25f};
  pb.preds.push_back(std::vector<double>(16 * 7, 0.0));
  const double iou = 1 / (1 + kEps), ln2 = std::log(2.0);
  for (DType t : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = t == DType::F64 ? 1e-15 : 1e-6;
    KernelRun run = run_kernel(pb, pb.preds, t);
    const auto& st = run.stores[0];
    // Slots (offset o, anchor 0, target 0) = o: only the centre matches, at cell 2 * 4 + 1.
    EXPECT_EQ(st.slot_cell, (std::vector<int32_t>{9, kernels::kNoCell, kernels::kNoCell,
                                                   kernels::kNoCell, kernels::kNoCell}));
    EXPECT_EQ(st.slot_cls[0], 1);
    EXPECT_EQ(std::vector<float>(st.slot_tbox.begin(), st.slot_tbox.begin() + 4),
              (std::vector<float>{0.5f, 0.5f, 1, 1}));
    EXPECT_TRUE(near_rel(st.slot_iou[0], iou, 0, tol));
    EXPECT_EQ(st.sorted_cell[0], 9);
    EXPECT_EQ(st.sorted_slot[0], 0);
    for (int64_t cell = 0; cell < 16; ++cell)
      EXPECT_TRUE(near_rel(st.tobj[static_cast<size_t>(cell)], cell == 9 ? iou : 0.0, 0, tol)) << cell;
    EXPECT_TRUE(near_rel(run.summary[0], 1 - iou, 0, t == DType::F64 ? 1e-15 : 1e-7));
    EXPECT_TRUE(near_rel(run.summary[1], 2 * ln2, 1e-6));  // BCE(0, 1) + BCE(0, 0)
    EXPECT_EQ(run.summary[2], 1.0);
    EXPECT_TRUE(near_rel(run.summary[3], 16 * ln2, 1e-6));  // tobj 1 or 0, pw 1: log 2 each
    EXPECT_EQ(run.summary[kernels::kSummaryBadRow], -1.0);
    // loss = (0.05 (1 - iou) + 1.0 * 16 ln2 / 16 + 0.5 * 2 ln2 / 2) * 1.
    const double want = 0.05 * (1 - iou) + 1.5 * ln2;
    EXPECT_TRUE(near_rel(run.total, want, t == DType::F64 ? 1e-14 : 1e-6));
    EXPECT_TRUE(near_rel(run.summary[kernels::kSummaryTotal], want, t == DType::F64 ? 1e-14 : 1e-6));
    // Gradients: objectness (sigmoid(0) - tobj) / 16; classes 0.25 (0.5 - target); the box sits
    // at the optimum, where the gradient vanishes (up to eps).
    const auto& g = run.grads[0];
    for (int64_t cell = 0; cell < 16; ++cell) {
      EXPECT_TRUE(near_rel(g[static_cast<size_t>(cell * 7 + 4)], (0.5 - (cell == 9 ? iou : 0.0)) / 16, 1e-6));
      if (cell == 9) continue;
      for (int ch : {0, 1, 2, 3, 5, 6}) EXPECT_EQ(g[static_cast<size_t>(cell * 7 + ch)], 0.0) << cell;
    }
    EXPECT_TRUE(near_rel(g[9 * 7 + 5], 0.125, 1e-6));
    EXPECT_TRUE(near_rel(g[9 * 7 + 6], -0.125, 1e-6));
    for (int ch = 0; ch < 4; ++ch) EXPECT_NEAR(g[static_cast<size_t>(9 * 7 + ch)], 0.0, 1e-7) << ch;
  }
}

TEST(YoloLossCpu, TwoLevelBatchMatchesTheNaiveLoss) {
  for (double gamma : {0.0, 1.5}) {
    SCOPED_TRACE(::testing::Message() << "fl_gamma " << gamma);
    const Problem pb = two_level_problem(gamma);
    const NaiveLoss want = naive_loss(pb, pb.preds);
    KernelRun run = run_kernel(pb, pb.preds, DType::F64, 1.0, false);
    int shared_cells = 0;
    for (int l = 0; l < 2; ++l) {
      const auto& st = run.stores[static_cast<size_t>(l)];
      const std::vector<Match> matches = naive_build_targets(pb, l);
      ASSERT_GT(matches.size(), 0u) << "level " << l;
      // The slot cells: naive matches at their slots, kNoCell elsewhere.
      std::vector<int32_t> cells(static_cast<size_t>(pb.c.slots()), kernels::kNoCell);
      for (const Match& m : matches) cells[static_cast<size_t>(m.slot)] = static_cast<int32_t>(m.cell);
      EXPECT_EQ(st.slot_cell, cells) << "level " << l;
      for (const Match& m : matches) {
        EXPECT_EQ(st.slot_cls[static_cast<size_t>(m.slot)], m.cls);
        for (int k = 0; k < 4; ++k)
          EXPECT_EQ(st.slot_tbox[static_cast<size_t>(4 * m.slot + k)], m.tbox[k]) << "slot " << m.slot;
      }
      // Sorted by cell, stable in slot order.
      for (size_t p = 1; p < st.sorted_cell.size(); ++p) {
        ASSERT_LE(st.sorted_cell[p - 1], st.sorted_cell[p]);
        if (st.sorted_cell[p - 1] == st.sorted_cell[p]) {
          EXPECT_LT(st.sorted_slot[p - 1], st.sorted_slot[p]);
          if (st.sorted_cell[p] != kernels::kNoCell) ++shared_cells;
        }
      }
      for (size_t k = 0; k < st.tobj.size(); ++k)
        EXPECT_TRUE(near_rel(st.tobj[k], want.frozen.tobj[static_cast<size_t>(l)][k], 0, 1e-14))
            << "level " << l << " cell " << k;
      for (int k = 0; k < 4; ++k)
        EXPECT_TRUE(near_rel(run.summary[static_cast<size_t>(4 * l + k)], want.sums[static_cast<size_t>(4 * l + k)], 1e-13))
            << "level " << l << " sum " << k;
    }
    EXPECT_GT(shared_cells, 0) << "the case should have cells with several matches";
    EXPECT_TRUE(near_rel(run.summary[kernels::kSummaryBox], want.box, 1e-13));
    EXPECT_TRUE(near_rel(run.summary[kernels::kSummaryObj], want.obj, 1e-13));
    EXPECT_TRUE(near_rel(run.summary[kernels::kSummaryCls], want.cls, 1e-13));
    EXPECT_TRUE(near_rel(run.total, want.loss, 1e-13));
    EXPECT_EQ(run.summary[kernels::kSummaryBadRow], -1.0);
  }
}

TEST(YoloLossCpu, SharedCellTakesTheLastMatchsIou) {
  // Two targets on the same centre cell of a 1-anchor 4x4 grid: slot 0 (target 0) and slot 1
  // (target 1) both land on cell 9; the objectness target is the CIoU of slot 1.
  Problem pb;
  LossConfig& c = pb.c;
  c.bs = 1;
  c.na = 1;
  c.nc = 2;
  c.nt = 2;
  pb.levels.push_back(make_level(4, 4, {1, 1}, 1.0));
  pb.targets = {0, 1, 0.375f, 0.625f, 0.25f, 0.25f,  //
                0, 0, 0.36f, 0.64f, 0.30f, 0.20f};
  std::vector<double> pred(16 * 7, 0.0);
  for (size_t k = 0; k < pred.size(); ++k) pred[k] = 0.1 * std::sin(static_cast<double>(k));
  pb.preds.push_back(pred);
  KernelRun run = run_kernel(pb, pb.preds, DType::F64);
  const auto& st = run.stores[0];
  ASSERT_EQ(st.slot_cell[0], 9);
  ASSERT_EQ(st.slot_cell[1], 9);
  EXPECT_NE(st.slot_iou[0], st.slot_iou[1]);
  EXPECT_EQ(st.tobj[9], std::max(st.slot_iou[1], 0.0));
  // Reversing the targets reverses the winner.
  Problem swapped = pb;
  swapped.targets = {0, 0, 0.36f, 0.64f, 0.30f, 0.20f,  //
                     0, 1, 0.375f, 0.625f, 0.25f, 0.25f};
  KernelRun run2 = run_kernel(swapped, swapped.preds, DType::F64);
  EXPECT_EQ(run2.stores[0].tobj[9], std::max(st.slot_iou[0], 0.0));
  // The class and box gradients at the shared cell sum both slots: check against the naive loss.
  const NaiveLoss want = naive_loss(pb, pb.preds);
  EXPECT_TRUE(near_rel(run.total, want.loss, 1e-13));
}

TEST(YoloLossCpu, GradientMatchesFiniteDifferences) {
  const double h = 1e-5;
  for (double gamma : {0.0, 1.5}) {
    SCOPED_TRACE(::testing::Message() << "fl_gamma " << gamma);
    const Problem pb = two_level_problem(gamma);
    const double g_total = 0.7;
    KernelRun run = run_kernel(pb, pb.preds, DType::F64, g_total);
    const Frozen frozen = naive_loss(pb, pb.preds).frozen;
    const int64_t no = pb.c.no();
    int nonzero = 0;
    for (int l = 0; l < 2; ++l) {
      for (size_t i = 0; i < pb.preds[static_cast<size_t>(l)].size(); ++i) {
        auto hi = pb.preds, lo = pb.preds;
        hi[static_cast<size_t>(l)][i] += h;
        lo[static_cast<size_t>(l)][i] -= h;
        // The naive loss with tobj and alpha detached, as the reference's graph.
        const double fd =
            g_total * (naive_loss(pb, hi, &frozen).loss - naive_loss(pb, lo, &frozen).loss) / (2 * h);
        const double got = run.grads[static_cast<size_t>(l)][i];
        ASSERT_TRUE(near_rel(got, fd, 1e-6, 1e-8)) << "level " << l << " element " << i << " channel " << i % no;
        if (got != 0 && i % no < 4) ++nonzero;
        // Objectness and class channels feed neither tobj nor alpha: the kernel's own forward
        // differentiates to the same values.
        if (static_cast<int64_t>(i % no) >= 4) {
          const double fk = g_total *
                            (run_kernel(pb, hi, DType::F64, 1, false).total -
                             run_kernel(pb, lo, DType::F64, 1, false).total) / (2 * h);
          ASSERT_TRUE(near_rel(got, fk, 1e-6, 1e-8)) << "level " << l << " element " << i;
        }
      }
    }
    EXPECT_GT(nonzero, 20) << "the matched cells' box channels should carry gradient";
  }
}

TEST(YoloLossCpu, Float32AgreesWithFloat64) {
  for (double gamma : {0.0, 1.5}) {
    Problem pb = two_level_problem(gamma);
    for (auto& p : pb.preds)
      for (double& v : p) v = static_cast<float>(v);  // the same inputs in both precisions
    KernelRun d = run_kernel(pb, pb.preds, DType::F64);
    KernelRun f = run_kernel(pb, pb.preds, DType::F32);
    EXPECT_TRUE(near_rel(f.total, d.total, 2e-6)) << "gamma " << gamma;
    for (int k = 0; k < kernels::kSummarySize; ++k)
      EXPECT_TRUE(near_rel(f.summary[static_cast<size_t>(k)], d.summary[static_cast<size_t>(k)], 1e-5, 1e-6)) << k;
    for (int l = 0; l < 2; ++l) {
      EXPECT_EQ(f.stores[static_cast<size_t>(l)].slot_cell, d.stores[static_cast<size_t>(l)].slot_cell);
      for (size_t i = 0; i < d.grads[static_cast<size_t>(l)].size(); ++i)
        ASSERT_TRUE(near_rel(f.grads[static_cast<size_t>(l)][i], d.grads[static_cast<size_t>(l)][i], 1e-4, 1e-7))
            << "level " << l << " element " << i;
    }
  }
}

TEST(YoloLossCpu, PaddingAndInvalidRowsChangeNothing) {
  const Problem pb = two_level_problem(0.0);
  KernelRun base = run_kernel(pb, pb.preds, DType::F64);
  Problem padded = pb;
  // An invalid row (class 3 of 3 classes) in the middle, padding rows at the end.
  std::vector<float> rows(pb.targets.begin(), pb.targets.begin() + 12);
  const std::vector<float> invalid = {0, 3, 0.5f, 0.5f, 0.2f, 0.2f};
  rows.insert(rows.end(), invalid.begin(), invalid.end());
  rows.insert(rows.end(), pb.targets.begin() + 12, pb.targets.end());
  for (int k = 0; k < 2; ++k) rows.insert(rows.end(), {-1, 0, 0.5f, 0.5f, 0.2f, 0.2f});
  padded.targets = rows;
  padded.c.nt = static_cast<int64_t>(rows.size() / 6);
  KernelRun run = run_kernel(padded, padded.preds, DType::F64);
  EXPECT_EQ(run.summary[kernels::kSummaryBadRow], 2.0);
  EXPECT_EQ(run.total, base.total);
  for (int k = 0; k < kernels::kSummaryBadRow; ++k) EXPECT_EQ(run.summary[static_cast<size_t>(k)], base.summary[static_cast<size_t>(k)]) << k;
  for (int l = 0; l < 2; ++l) EXPECT_EQ(run.grads[static_cast<size_t>(l)], base.grads[static_cast<size_t>(l)]) << "level " << l;
  // Padding alone is not reported.
  Problem pad_only = pb;
  pad_only.targets.insert(pad_only.targets.end(), {-1, 0, 0, 0, 0, 0});
  pad_only.c.nt += 1;
  KernelRun r2 = run_kernel(pad_only, pad_only.preds, DType::F64);
  EXPECT_EQ(r2.summary[kernels::kSummaryBadRow], -1.0);
  EXPECT_EQ(r2.total, base.total);
  // No valid target at all: only the objectness loss (every tobj 0) remains.
  Problem none = pb;
  none.targets = {-1, 0, 0, 0, 0, 0, 0, 0, 2.0f, 0.5f, 0.1f, 0.1f};
  none.c.nt = 2;
  KernelRun r3 = run_kernel(none, none.preds, DType::F64);
  EXPECT_EQ(r3.summary[kernels::kSummaryBadRow], 1.0);
  EXPECT_EQ(r3.summary[kernels::kSummaryBox], 0.0);
  EXPECT_EQ(r3.summary[kernels::kSummaryCls], 0.0);
  const NaiveLoss want = naive_loss(none, none.preds);
  EXPECT_TRUE(near_rel(r3.total, want.loss, 1e-13));
  EXPECT_GT(r3.total, 0.0);
}

TEST(YoloLossCpu, HalfPrecisionIsRefusedOnTheCpu) {
  Problem pb;
  pb.c.bs = 1;
  pb.c.na = 1;
  pb.c.nc = 1;
  pb.c.nt = 0;
  pb.levels.push_back(make_level(1, 1, {1, 1}, 1.0));
  pb.preds.push_back(std::vector<double>(6, 0.0));
  const std::string msg = kestrel::testing::error_of([&] { run_kernel(pb, pb.preds, DType::BF16); });
  EXPECT_NE(msg.find("yolo loss"), std::string::npos) << msg;
}
