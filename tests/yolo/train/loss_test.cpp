// ComputeLoss on the CPU against hand-computed values and against a naive re-statement of the
// reference's ComputeLoss written here from the Python (match list in build_targets order, a map
// for tobj, formulas in float64). Gradients: central differences of that naive loss with the
// reference's detached quantities (CIoU's alpha, the objectness targets) frozen at the point, which
// is exactly the gradient the reference's autograd computes.
#include "yolo/train/loss.h"

#include <cmath>
#include <map>

#include "engine/autograd.h"
#include "engine/random.h"
#include "kernels/yolo_loss.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::random_tensor;

namespace {

// ---- the naive reference --------------------------------------------------------------------

struct Frozen {
  std::vector<double> alpha;          // per match, in order over levels
  std::map<int64_t, double> tobj;     // (level, cell) -> target
  bool active = false;
};

struct NaiveLevel {
  int64_t ny, nx;
  std::vector<float> anchors;  // na x 2 grid units
};

double log_sigmoid(double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x))); }

double naive_bce(double x, double t, double pw, double gamma) {
  double l = -(pw * t * log_sigmoid(x) + (1 - t) * log_sigmoid(-x));
  if (gamma > 0) {
    const double p = 1 / (1 + std::exp(-x));
    const double pt = t * p + (1 - t) * (1 - p);
    l *= (t * 0.25 + (1 - t) * 0.75) * std::pow(1 - pt, gamma);
  }
  return l;
}

// bbox_iou(..., CIoU=True) on xywh boxes; alpha from `frozen` when given.
double naive_ciou(const double b1[4], const double b2[4], double* alpha, bool use_alpha) {
  const double eps = 1e-7;
  const double ax1 = b1[0] - b1[2] / 2, ax2 = b1[0] + b1[2] / 2, ay1 = b1[1] - b1[3] / 2, ay2 = b1[1] + b1[3] / 2;
  const double bx1 = b2[0] - b2[2] / 2, bx2 = b2[0] + b2[2] / 2, by1 = b2[1] - b2[3] / 2, by2 = b2[1] + b2[3] / 2;
  const double inter = std::max(std::min(ax2, bx2) - std::max(ax1, bx1), 0.0) *
                       std::max(std::min(ay2, by2) - std::max(ay1, by1), 0.0);
  const double uni = b1[2] * b1[3] + b2[2] * b2[3] - inter + eps;
  const double iou = inter / uni;
  const double cw = std::max(ax2, bx2) - std::min(ax1, bx1), ch = std::max(ay2, by2) - std::min(ay1, by1);
  const double c2 = cw * cw + ch * ch + eps;
  const double rho2 = (std::pow(bx1 + bx2 - ax1 - ax2, 2) + std::pow(by1 + by2 - ay1 - ay2, 2)) / 4;
  const double v = 4 / (M_PI * M_PI) * std::pow(std::atan(b2[2] / b2[3]) - std::atan(b1[2] / b1[3]), 2);
  if (!use_alpha) *alpha = v / (v - iou + (1 + eps));
  return iou - (rho2 / c2 + v * *alpha);
}

struct NaiveResult {
  double box = 0, obj = 0, cls = 0, total = 0;
};

// preds[l]: (bs, na, ny, nx, no) row-major doubles; targets: M rows of 6 floats.
NaiveResult naive_loss(const std::vector<std::vector<double>>& preds,
                       const std::vector<NaiveLevel>& levels, int64_t bs, int64_t na, int64_t nc,
                       const std::vector<float>& targets, const Hyp& h, Frozen& fz) {
  const int64_t no = nc + 5, nt = static_cast<int64_t>(targets.size() / 6);
  const int64_t nl = static_cast<int64_t>(levels.size());
  const std::vector<double> balance =
      nl == 3 ? std::vector<double>{4.0, 1.0, 0.4} : std::vector<double>{4.0, 1.0, 0.25, 0.06, 0.02};
  const double cp = 1 - 0.5 * h.label_smoothing, cn = 0.5 * h.label_smoothing;
  const float g = 0.5f;
  const float off[5][2] = {{0, 0}, {1, 0}, {0, 1}, {-1, 0}, {0, -1}};
  NaiveResult r;
  size_t match_index = 0;
  for (int64_t l = 0; l < nl; ++l) {
    const NaiveLevel& lv = levels[l];
    const std::vector<double>& p = preds[l];
    struct Match { int64_t b, a, gj, gi, c; float tb[4]; };
    std::vector<Match> ms;
    for (int o = 0; o < 5; ++o)
      for (int64_t a = 0; a < na; ++a)
        for (int64_t t = 0; t < nt; ++t) {
          const float* row = &targets[6 * t];
          const float gxy[2] = {row[2] * float(lv.nx), row[3] * float(lv.ny)};
          const float gwh[2] = {row[4] * float(lv.nx), row[5] * float(lv.ny)};
          float worst = 0;
          for (int k = 0; k < 2; ++k) {
            const float rr = gwh[k] / lv.anchors[2 * a + k];
            worst = std::max(worst, std::max(rr, 1 / rr));
          }
          if (!(worst < float(h.anchor_t))) continue;
          const float gxi[2] = {float(lv.nx) - gxy[0], float(lv.ny) - gxy[1]};
          const bool sel[5] = {true, std::fmod(gxy[0], 1.0f) < g && gxy[0] > 1,
                               std::fmod(gxy[1], 1.0f) < g && gxy[1] > 1,
                               std::fmod(gxi[0], 1.0f) < g && gxi[0] > 1,
                               std::fmod(gxi[1], 1.0f) < g && gxi[1] > 1};
          if (!sel[o]) continue;
          Match m;
          m.b = static_cast<int64_t>(row[0]);
          m.c = static_cast<int64_t>(row[1]);
          m.a = a;
          m.gi = std::clamp<int64_t>(static_cast<int64_t>(gxy[0] - off[o][0] * g), 0, lv.nx - 1);
          m.gj = std::clamp<int64_t>(static_cast<int64_t>(gxy[1] - off[o][1] * g), 0, lv.ny - 1);
          m.tb[0] = gxy[0] - float(m.gi);
          m.tb[1] = gxy[1] - float(m.gj);
          m.tb[2] = gwh[0];
          m.tb[3] = gwh[1];
          ms.push_back(m);
        }
    std::map<int64_t, double> tobj;
    double lbox = 0, lcls = 0;
    for (const Match& m : ms) {
      const int64_t cell = ((m.b * na + m.a) * lv.ny + m.gj) * lv.nx + m.gi;
      const double* x = &p[cell * no];
      auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
      const double pb[4] = {sig(x[0]) * 2 - 0.5, sig(x[1]) * 2 - 0.5,
                            std::pow(sig(x[2]) * 2, 2) * lv.anchors[2 * m.a],
                            std::pow(sig(x[3]) * 2, 2) * lv.anchors[2 * m.a + 1]};
      const double tb[4] = {m.tb[0], m.tb[1], m.tb[2], m.tb[3]};
      if (!fz.active) fz.alpha.push_back(0);
      const double ciou = naive_ciou(pb, tb, &fz.alpha[match_index++], fz.active);
      lbox += (1 - ciou) / double(ms.size());
      tobj[cell] = std::max(ciou, 0.0);  // later matches overwrite: the documented order
      if (nc > 1)
        for (int64_t c = 0; c < nc; ++c)
          lcls += naive_bce(x[5 + c], c == m.c ? cp : cn, h.cls_pw, h.fl_gamma) / double(ms.size() * nc);
    }
    double lobj = 0;
    const int64_t cells = bs * na * lv.ny * lv.nx;
    for (int64_t cell = 0; cell < cells; ++cell) {
      double t = tobj.count(cell) ? tobj[cell] : 0.0;
      const int64_t key = l * (int64_t(1) << 40) + cell;
      if (fz.active) t = fz.tobj.count(key) ? fz.tobj[key] : 0.0;
      else if (tobj.count(cell)) fz.tobj[key] = t;
      lobj += naive_bce(p[cell * no + 4], t, h.obj_pw, h.fl_gamma) / double(cells);
    }
    r.box += lbox;
    r.cls += lcls;
    r.obj += lobj * balance[l];
  }
  r.box *= h.box;
  r.obj *= h.obj;
  r.cls *= h.cls;
  r.total = (r.box + r.obj + r.cls) * double(bs);
  return r;
}

// ---- fixtures -----------------------------------------------------------------------------------

// A Detect head without a model: 2 levels (strides 8 and 16) of 3 anchors, nc classes.
std::shared_ptr<layers::Detect> make_detect(int64_t nc, int levels = 2) {
  Generator gen(3);
  const std::vector<std::vector<double>> all = {{10, 13, 16, 30, 33, 23},
                                                {30, 61, 62, 45, 59, 119},
                                                {116, 90, 156, 198, 373, 326},
                                                {436, 615, 739, 380, 925, 792}};
  std::vector<std::vector<double>> anchors(all.begin(), all.begin() + levels);
  std::vector<double> strides;
  for (int l = 0; l < levels; ++l) strides.push_back(8.0 * (1 << l));
  auto d = std::make_shared<layers::Detect>(nc, anchors, std::vector<int64_t>(levels, 4), gen);
  d->set_strides(strides);
  return d;
}

struct Problem {
  std::shared_ptr<layers::Detect> detect;
  std::vector<Tensor> preds;  // float64 leaves requiring grad
  Tensor targets;
  int64_t bs = 2;

  Problem(int64_t nc, const std::vector<float>& rows, int levels = 2, int img = 32, uint64_t seed = 1)
      : detect(make_detect(nc, levels)) {
    for (int l = 0; l < levels; ++l) {
      const int64_t g = img / (8 << l);
      preds.push_back(random_tensor({bs, 3, g, g, nc + 5}, seed + l, DType::F64, -2, 2).set_requires_grad());
    }
    targets = Tensor::from_vector(rows, {static_cast<int64_t>(rows.size() / 6), 6});
  }

  std::vector<NaiveLevel> naive_levels() const {
    std::vector<float> a = detect->anchors.to_vector<float>();
    std::vector<NaiveLevel> out;
    for (size_t l = 0; l < preds.size(); ++l)
      out.push_back({preds[l].size(2), preds[l].size(3),
                     std::vector<float>(a.begin() + l * 6, a.begin() + (l + 1) * 6)});
    return out;
  }
  std::vector<std::vector<double>> values() const {
    std::vector<std::vector<double>> v;
    for (const Tensor& p : preds) v.push_back(p.to_vector<double>());
    return v;
  }
  NaiveResult naive(const Hyp& h, Frozen& fz) const {
    return naive_loss(values(), naive_levels(), bs, 3, detect->nc, targets.to_vector<float>(), h, fz);
  }
};

// Targets with edge cases: near-left/top edges, the image border (duplicate cells), two targets on
// one cell and anchor, a wide box only the large anchors take, a tiny box some levels reject.
const std::vector<float> kRows = {
    0, 0, 0.30f, 0.70f, 0.25f, 0.30f,  // left and down neighbours on the 4x4 grid
    0, 2, 1.00f, 0.50f, 0.20f, 0.40f,  // right border: centre and left neighbour share a cell
    1, 1, 0.52f, 0.12f, 0.60f, 0.20f,  // top rows
    1, 1, 0.55f, 0.14f, 0.30f, 0.35f,  // same cell as the previous target on the 4x4 grid
    1, 0, 0.00f, 1.00f, 0.90f, 0.15f,  // corner, wide
    0, 1, 0.62f, 0.38f, 0.04f, 0.05f,  // small
};

void expect_matches_naive(const Hyp& h, int64_t nc, const std::vector<float>& rows, int levels = 2) {
  Problem pr(nc, rows, levels);
  ComputeLoss loss(*pr.detect, h);
  LossResult r = loss(pr.preds, pr.targets);
  Frozen fz;
  NaiveResult n = pr.naive(h, fz);
  EXPECT_NEAR(r.box, n.box, 1e-12 * std::max(1.0, n.box));
  EXPECT_NEAR(r.obj, n.obj, 1e-12 * std::max(1.0, n.obj));
  EXPECT_NEAR(r.cls, n.cls, 1e-12 * std::max(1.0, n.cls));
  EXPECT_NEAR(r.total.item(), n.total, 1e-12 * std::max(1.0, n.total));
  EXPECT_EQ(r.total.dtype(), DType::F64);
  EXPECT_EQ(r.total.dim(), 0);

  // Gradients: autograd against central differences of the naive loss with the detached
  // quantities frozen (step 1e-6 in float64: truncation and rounding errors below 1e-10).
  r.total.backward();
  fz.active = true;
  for (size_t l = 0; l < pr.preds.size(); ++l) {
    std::vector<double> analytic = pr.preds[l].grad().to_vector<double>();
    double* data = pr.preds[l].data<double>();
    for (int64_t i = 0; i < pr.preds[l].numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + 1e-6;
      const double plus = pr.naive(h, fz).total;
      data[i] = saved - 1e-6;
      const double minus = pr.naive(h, fz).total;
      data[i] = saved;
      const double numeric = (plus - minus) / 2e-6;
      ASSERT_NEAR(analytic[i], numeric, 1e-9 + 1e-6 * std::abs(numeric))
          << "level " << l << " element " << i << " channel " << i % (nc + 5);
    }
  }
}

}  // namespace

TEST(YoloLoss, ScalesHypAsTrainPy) {
  Hyp h;
  Hyp s = scale_loss_hyp(h, 3, 80, 640);
  EXPECT_DOUBLE_EQ(s.box, 0.05);
  EXPECT_DOUBLE_EQ(s.cls, 0.5);
  EXPECT_DOUBLE_EQ(s.obj, 1.0);
  h.label_smoothing = 0.1;
  s = scale_loss_hyp(h, 4, 3, 320);
  EXPECT_DOUBLE_EQ(s.box, 0.05 * 0.75);
  EXPECT_DOUBLE_EQ(s.cls, 0.5 * (3.0 / 80 * 3 / 4));
  EXPECT_DOUBLE_EQ(s.obj, 1.0 * (0.25 * 3 / 4));
  EXPECT_DOUBLE_EQ(s.label_smoothing, 0.1);
  EXPECT_DOUBLE_EQ(s.lr0, h.lr0);
  EXPECT_THROW(scale_loss_hyp(h, 0, 3, 640), Error);
}

TEST(YoloLoss, CiouHandValues) {
  double g[4];
  // Same aspect, shifted by half a width: IoU 1/3, enclosing 3x2 (c2 = 13), centre distance 1.
  const double p1[4] = {0, 0, 2, 2}, t1[4] = {1, 0, 2, 2};
  EXPECT_NEAR(kernels::ciou_with_grad(p1, t1, g), 1.0 / 3 - 1.0 / 13, 1e-7);
  // Concentric 2x1 and 1x2: IoU 1/3, v = 4/pi^2 (atan 2 - atan 0.5)^2, alpha = v / (v + 2/3).
  const double p2[4] = {0, 0, 2, 1}, t2[4] = {0, 0, 1, 2};
  const double v = 4 / (M_PI * M_PI) * std::pow(std::atan(2.0) - std::atan(0.5), 2);
  EXPECT_NEAR(kernels::ciou_with_grad(p2, t2, g), 1.0 / 3 - v * v / (v + 2.0 / 3), 1e-7);
  // Identical boxes: CIoU 1 (up to eps), gradient zero at the optimum in x and y.
  const double p3[4] = {0.5, 0.5, 1.5, 1.0};
  EXPECT_NEAR(kernels::ciou_with_grad(p3, p3, g), 1.0, 1e-6);
  EXPECT_NEAR(g[0], 0.0, 1e-9);
  EXPECT_NEAR(g[1], 0.0, 1e-9);
}

TEST(YoloLoss, BuildTargetsNeighboursAndBorders) {
  kernels::LossConfig c;
  c.bs = 2;
  c.na = 3;
  c.nc = 3;
  kernels::LossLevel lv;
  lv.ny = lv.nx = 8;
  const float anchors[6] = {1, 1, 2, 2, 9, 9};
  std::copy(anchors, anchors + 6, lv.anchors);
  int32_t cls;
  float tb[4];
  auto cell = [&](int64_t b, int64_t a, int64_t gj, int64_t gi) {
    return static_cast<int32_t>(((b * 3 + a) * 8 + gj) * 8 + gi);
  };
  // x = 0.3 -> gx 2.4 (fraction 0.4): the left neighbour; y = 0.7 -> gy 5.6: the lower neighbour.
  const float r1[6] = {1, 2, 0.3f, 0.7f, 0.25f, 0.25f};
  EXPECT_EQ(kernels::match_slot(r1, 0, 0, lv, c, &cls, tb), cell(1, 0, 5, 2));
  EXPECT_EQ(cls, 2);
  EXPECT_NEAR(tb[0], 0.4, 1e-6);
  EXPECT_NEAR(tb[1], 0.6, 1e-6);
  EXPECT_EQ(tb[2], 2.0f);
  EXPECT_EQ(kernels::match_slot(r1, 1, 0, lv, c, &cls, tb), cell(1, 0, 5, 1));  // left
  EXPECT_NEAR(tb[0], 1.4, 1e-6);
  EXPECT_EQ(kernels::match_slot(r1, 2, 0, lv, c, &cls, tb), kernels::kNoCell);  // up: fraction 0.6
  EXPECT_EQ(kernels::match_slot(r1, 3, 0, lv, c, &cls, tb), kernels::kNoCell);  // right
  EXPECT_EQ(kernels::match_slot(r1, 4, 0, lv, c, &cls, tb), cell(1, 0, 6, 2));  // down
  EXPECT_NEAR(tb[1], -0.4, 1e-6);
  // Both small anchors match (ratios 2 and 1); the 9x9 anchor is rejected (9 / 2 = 4.5 > 4).
  EXPECT_NE(kernels::match_slot(r1, 0, 1, lv, c, &cls, tb), kernels::kNoCell);
  EXPECT_EQ(kernels::match_slot(r1, 0, 2, lv, c, &cls, tb), kernels::kNoCell);
  // A ratio of exactly 4 is rejected (strict <): w = 0.5 -> 4 cells against a 1-cell anchor.
  const float r2[6] = {0, 0, 0.5f, 0.5f, 0.5f, 0.125f};
  EXPECT_EQ(kernels::match_slot(r2, 0, 0, lv, c, &cls, tb), kernels::kNoCell);
  // Near the top-left border (gx 0.4, gy 0.4): no neighbours, the cell (0, 0).
  const float r3[6] = {0, 1, 0.05f, 0.05f, 0.2f, 0.2f};
  EXPECT_EQ(kernels::match_slot(r3, 0, 0, lv, c, &cls, tb), cell(0, 0, 0, 0));
  for (int o = 1; o < 5; ++o) EXPECT_EQ(kernels::match_slot(r3, o, 0, lv, c, &cls, tb), kernels::kNoCell);
  // x = 1: the centre cell index 8 is clamped to 7 (tbox x stays 1); the left neighbour is the
  // same cell; y = 0.5 (gy 4.0, fraction 0): both the up and the down neighbour are taken.
  const float r4[6] = {0, 0, 1.0f, 0.5f, 0.2f, 0.2f};
  EXPECT_EQ(kernels::match_slot(r4, 0, 0, lv, c, &cls, tb), cell(0, 0, 4, 7));
  EXPECT_EQ(tb[0], 1.0f);
  EXPECT_EQ(kernels::match_slot(r4, 1, 0, lv, c, &cls, tb), cell(0, 0, 4, 7));
  EXPECT_EQ(tb[0], 1.0f);
  EXPECT_EQ(kernels::match_slot(r4, 2, 0, lv, c, &cls, tb), cell(0, 0, 3, 7));
  EXPECT_EQ(tb[1], 1.0f);
  EXPECT_EQ(kernels::match_slot(r4, 3, 0, lv, c, &cls, tb), kernels::kNoCell);
  EXPECT_EQ(kernels::match_slot(r4, 4, 0, lv, c, &cls, tb), cell(0, 0, 4, 7));
  EXPECT_EQ(tb[1], 0.0f);
  // Row validity.
  const float bad_class[6] = {0, 3, 0.5f, 0.5f, 0.1f, 0.1f}, bad_image[6] = {2, 0, 0.5f, 0.5f, 0.1f, 0.1f};
  const float bad_x[6] = {0, 0, 1.5f, 0.5f, 0.1f, 0.1f}, bad_nan[6] = {0, 0, 0.5f, NAN, 0.1f, 0.1f};
  const float frac_class[6] = {0, 0.5f, 0.5f, 0.5f, 0.1f, 0.1f};
  EXPECT_TRUE(kernels::target_row_valid(r1, 2, 3));
  for (const float* r : {bad_class, bad_image, bad_x, bad_nan, frac_class})
    EXPECT_FALSE(kernels::target_row_valid(r, 2, 3));
}

TEST(YoloLoss, MatchesNaiveReferenceAndFiniteDifferences) {
  Hyp h = scale_loss_hyp(Hyp{}, 2, 3, 640);
  expect_matches_naive(h, 3, kRows);
}

TEST(YoloLoss, FocalSmoothingAndPosWeights) {
  Hyp h = scale_loss_hyp(Hyp{}, 2, 3, 640);
  h.fl_gamma = 1.5;
  h.label_smoothing = 0.1;
  h.cls_pw = 1.7;
  h.obj_pw = 0.6;
  expect_matches_naive(h, 3, kRows);
}

TEST(YoloLoss, SingleClassHasNoClassLoss) {
  std::vector<float> rows = kRows;
  for (size_t i = 1; i < rows.size(); i += 6) rows[i] = 0;
  Hyp h;
  expect_matches_naive(h, 1, rows);
  Problem pr(1, rows);
  LossResult r = ComputeLoss(*pr.detect, h)(pr.preds, pr.targets);
  EXPECT_EQ(r.cls, 0.0);
  r.total.backward();
  for (const Tensor& p : pr.preds) {
    std::vector<double> g = p.grad().to_vector<double>();
    for (size_t i = 5; i < g.size(); i += 6) EXPECT_EQ(g[i], 0.0);
  }
}

TEST(YoloLoss, FourLevelBalance) {
  Problem pr(3, kRows, 4, 128);
  ComputeLoss loss(*pr.detect, Hyp{});
  EXPECT_EQ(loss.balance(), (std::vector<double>{4.0, 1.0, 0.25, 0.06}));
  EXPECT_EQ(ComputeLoss(*make_detect(3, 3), Hyp{}).balance(), (std::vector<double>{4.0, 1.0, 0.4}));
  LossResult r = loss(pr.preds, pr.targets);
  Frozen fz;
  EXPECT_NEAR(r.total.item(), pr.naive(Hyp{}, fz).total, 1e-12);
}

TEST(YoloLoss, ClassLossAgainstGradcheck) {
  // With box and objectness off nothing is detached: the generic gradcheck applies directly.
  Hyp h;
  h.box = 0;
  h.obj = 0;
  h.fl_gamma = 2.0;
  h.label_smoothing = 0.2;
  Problem pr(3, kRows);
  ComputeLoss loss(*pr.detect, h);
  EXPECT_TRUE(kestrel::testing::gradcheck([&](const std::vector<Tensor>& in) { return loss(in, pr.targets).total; },
                                 pr.preds));
}

TEST(YoloLoss, LastMatchSetsTheObjectnessTarget) {
  // Two targets on one cell and anchor: the objectness target is the CIoU of the later row, so
  // swapping the rows changes the objectness loss and nothing else.
  const std::vector<float> a = {0, 0, 0.40f, 0.40f, 0.20f, 0.20f, 0, 1, 0.45f, 0.45f, 0.25f, 0.15f};
  std::vector<float> b(a.begin() + 6, a.end());
  b.insert(b.end(), a.begin(), a.begin() + 6);
  Problem pa(3, a), pb(3, b);
  for (size_t l = 0; l < pa.preds.size(); ++l) pb.preds[l] = pa.preds[l];
  LossResult ra = ComputeLoss(*pa.detect, Hyp{})(pa.preds, pa.targets);
  LossResult rb = ComputeLoss(*pb.detect, Hyp{})(pb.preds, pb.targets);
  EXPECT_NEAR(ra.box, rb.box, 1e-14);
  EXPECT_NEAR(ra.cls, rb.cls, 1e-14);
  EXPECT_GT(std::abs(ra.obj - rb.obj), 1e-6);
  Frozen fa, fb;
  EXPECT_NEAR(ra.obj, pa.naive(Hyp{}, fa).obj, 1e-13);
  EXPECT_NEAR(rb.obj, pb.naive(Hyp{}, fb).obj, 1e-13);
}

TEST(YoloLoss, EmptyTargetsGiveObjectnessOnly) {
  Problem pr(3, {});
  Hyp h;
  LossResult r = ComputeLoss(*pr.detect, h)(pr.preds, pr.targets);
  EXPECT_EQ(r.box, 0.0);
  EXPECT_EQ(r.cls, 0.0);
  // Objectness: balance-weighted mean of BCE(x, 0) = softplus(x) per level.
  double expected = 0;
  const double balance[2] = {4.0, 1.0};
  for (size_t l = 0; l < 2; ++l) {
    std::vector<double> v = pr.preds[l].to_vector<double>();
    double sum = 0;
    for (size_t i = 4; i < v.size(); i += 8) sum += std::log1p(std::exp(v[i]));
    expected += balance[l] * sum / double(v.size() / 8);
  }
  EXPECT_NEAR(r.obj, expected * h.obj, 1e-12);
  EXPECT_NEAR(r.total.item(), 2 * r.obj, 1e-12);
  r.total.backward();
  for (const Tensor& p : pr.preds) {
    std::vector<double> g = p.grad().to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i)
      if (i % 8 != 4) {
        ASSERT_EQ(g[i], 0.0) << i;
      }
  }
}

TEST(YoloLoss, RefusesBadInput) {
  Problem pr(3, {0, 3, 0.5f, 0.5f, 0.1f, 0.1f});
  ComputeLoss loss(*pr.detect, Hyp{});
  try {
    loss(pr.preds, pr.targets);
    FAIL() << "class 3 of 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target row 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(loss({pr.preds[0]}, pr.targets), Error);
  EXPECT_THROW(loss(pr.preds, Tensor::zeros({2, 5})), Error);
  EXPECT_THROW(loss({pr.preds[0].to(DType::F16), pr.preds[1].to(DType::F16)}, pr.targets), Error);
  Tensor wrong_no = random_tensor({2, 3, 4, 4, 9}, 1);
  EXPECT_THROW(loss({wrong_no, pr.preds[1]}, pr.targets), Error);
}

TEST(YoloLoss, Float32MatchesFloat64) {
  Problem pr(3, kRows);
  ComputeLoss loss(*pr.detect, Hyp{});
  LossResult r64 = loss(pr.preds, pr.targets);
  std::vector<Tensor> p32;
  for (const Tensor& p : pr.preds) p32.push_back(p.detach().to(DType::F32).set_requires_grad());
  LossResult r32 = loss(p32, pr.targets);
  EXPECT_EQ(r32.total.dtype(), DType::F32);
  EXPECT_NEAR(r32.total.item(), r64.total.item(), 1e-5 * r64.total.item());
  r64.total.backward();
  r32.total.backward();
  for (size_t l = 0; l < p32.size(); ++l)
    EXPECT_TRUE(kestrel::testing::all_close(p32[l].grad(), pr.preds[l].grad(), 1e-6, 1e-4));
}

TEST(YoloLoss, Yolov5nEndToEnd) {
  DetectionModel model(load_model_config("models/yolov5n.yaml"), 3, 0);
  Tensor x = random_tensor({2, 64, 64, 3}, 5, DType::F32, 0, 1);
  std::vector<Tensor> preds = model.forward(x);
  ComputeLoss loss(model.detect(), scale_loss_hyp(Hyp{}, 3, 3, 64));
  const std::vector<float> rows = {0, 0, 0.5f, 0.5f, 0.3f, 0.4f, 1, 2, 0.2f, 0.7f, 0.1f, 0.1f,
                                   1, 1, 0.8f, 0.3f, 0.6f, 0.5f};
  LossResult r = loss(preds, Tensor::from_vector(rows, {3, 6}));
  EXPECT_TRUE(std::isfinite(r.total.item()));
  EXPECT_GT(r.box, 0);
  EXPECT_GT(r.obj, 0);
  EXPECT_GT(r.cls, 0);
  r.total.backward();
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    for (double v : p.grad().to_double_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

// Padding rows (image index -1) change nothing: the padded targets' loss, its components and its
// gradient equal the unpadded ones bit for bit, in float64 and float32 and without targets at all
// (the real slots keep their relative order, padding slots match nothing and add nothing).
TEST(YoloLoss, PaddedTargetsGiveTheSameLossAndGradients) {
  for (const std::vector<float>& rows : {kRows, std::vector<float>{}}) {
    for (DType dt : {DType::F64, DType::F32}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(rows.size() / 6) + " rows");
      Problem pr(3, rows);
      ComputeLoss loss(*pr.detect, Hyp{});
      auto leaves = [&] {
        std::vector<Tensor> p;
        for (const Tensor& x : pr.preds) p.push_back(x.detach().to(dt).set_requires_grad());
        return p;
      };
      const std::vector<Tensor> plain_preds = leaves(), padded_preds = leaves();
      const Tensor padded = pad_targets(pr.targets, 64);
      ASSERT_EQ(padded.size(0), 64);
      const LossResult plain = loss(plain_preds, pr.targets), pad = loss(padded_preds, padded);
      EXPECT_EQ(pad.box, plain.box);
      EXPECT_EQ(pad.obj, plain.obj);
      EXPECT_EQ(pad.cls, plain.cls);
      EXPECT_EQ(pad.total.item(), plain.total.item());
      plain.total.backward();
      pad.total.backward();
      for (size_t l = 0; l < plain_preds.size(); ++l)
        EXPECT_TRUE(kestrel::testing::all_close(padded_preds[l].grad(), plain_preds[l].grad(), 0, 0))
            << "level " << l;
      const DeviceLoss dl = loss.forward(padded_preds, padded);
      EXPECT_EQ(dl.summary.to_vector<double>()[kernels::kSummaryBadRow], -1.0) << "padding is not invalid";
    }
  }
}

TEST(YoloLoss, PaddingKeepsTheRowsAndStillRefusesBadOnes) {
  const Tensor t = Tensor::from_vector(kRows, {6, 6});
  const Tensor p = pad_targets(t, 8);
  const std::vector<float> v = p.to_vector<float>();
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 36), kRows);
  EXPECT_EQ(std::vector<float>(v.begin() + 36, v.end()),
            (std::vector<float>{-1, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0}));
  EXPECT_THROW(pad_targets(t, 5), Error);
  EXPECT_EQ(padded_target_rows(0), 64);
  EXPECT_EQ(padded_target_rows(64), 64);
  EXPECT_EQ(padded_target_rows(65), 128);
  EXPECT_EQ(padded_target_rows(3000), 4096);
  Problem pr(3, kRows);
  ComputeLoss loss(*pr.detect, Hyp{});
  EXPECT_NO_THROW(loss.check_targets(p, pr.bs));
  // Another negative image index is no padding: still an invalid row, named.
  std::vector<float> bad = kRows;
  bad[6] = -2;
  try {
    loss(pr.preds, pad_targets(Tensor::from_vector(bad, {6, 6}), 64));
    FAIL() << "image -2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target row 1"), std::string::npos) << e.what();
  }
}
