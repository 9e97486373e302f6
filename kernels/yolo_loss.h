// The YOLOv5 training loss (the reference v7.0 ComputeLoss): target assignment, CIoU box loss,
// objectness and class BCE-with-logits (pos_weight, label smoothing, optional focal modulation),
// and the analytic gradient w.r.t. the raw Detect outputs. CPU reference and CUDA side by side.
//
// Data flow, per output level (predictions (bs, na, ny, nx, no) contiguous, no = nc + 5):
//   1. match: every (offset o, anchor a, target t) triple is one "slot", s = (o*na + a)*nt + t,
//      the order in which the reference's build_targets lists its matches. A slot holds the cell
//      (b, a, gj, gi) it assigns the target to, or kNoCell.
//   2. slot terms: CIoU of each matched slot and dCIoU/d raw box, class BCE, and the sums.
//   3. sort: slot ids stably sorted by cell, so the slots sharing a cell form one run in
//      ascending slot order.
//   4. objectness target scatter: each cell with matches takes the CIoU (clamped at 0) of the LAST
//      slot of its run. The reference writes tobj[b, a, gj, gi] = iou with index_put, where the
//      winner among duplicates is unspecified (and varies on CUDA); we define it as the highest
//      slot index: the last match in build_targets order.
//   5. objectness BCE over every cell, then the level sums are combined into the loss.
// Backward writes every element of d loss / d pred once: the objectness channel of every cell from
// the dense target, the other channels from the runs (a cell's slots summed in slot order), so
// no floating-point atomics are used and CPU and CUDA agree on the order of every sum.
//
// Targets are float32 rows (image, class, x, y, w, h) with xywh normalised. A row is valid when
// all values are finite, image and class are integers in [0, bs) and [0, nc), 0 <= x, y <= 1 and
// w, h >= 0; an invalid row matches nothing and its index is reported in the summary. A padding
// row (image index -1) matches nothing and is not reported: padded to a fixed row count, the
// targets give every buffer of the loss a fixed size (what a captured CUDA graph replays), and the
// loss and its gradient equal the unpadded ones (the real slots keep their order).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/rounding.h"

namespace kestrel::kernels {

constexpr int kLossMaxLevels = 5;    // the reference's balance table stops at P7
constexpr int kLossMaxAnchors = 16;
constexpr int kLossOffsets = 5;      // the centre cell and the 4 neighbours (left, up, right, down)
constexpr int32_t kNoCell = INT32_MAX;  // sorts after every cell

struct LossConfig {
  int64_t bs = 0, na = 0, nc = 0, nt = 0;  // batch, anchors per level, classes, targets
  float anchor_t = 4.0f;
  double cp = 1.0, cn = 0.0;  // class targets after label smoothing (smooth_BCE)
  double cls_pw = 1.0, obj_pw = 1.0, fl_gamma = 0.0;
  double box_gain = 0.05, obj_gain = 1.0, cls_gain = 0.5;  // hyp box, obj, cls (already scaled)

  KESTREL_HD int64_t no() const { return nc + 5; }
  KESTREL_HD int64_t slots() const { return kLossOffsets * na * nt; }
};

struct LossLevel {
  int64_t ny = 0, nx = 0;
  float anchors[2 * kLossMaxAnchors] = {};  // (w, h) per anchor in grid units, float32 as the reference's buffer
  double balance = 1.0;                     // objectness weight of this level
  KESTREL_HD int64_t cells(const LossConfig& c) const { return c.bs * c.na * ny * nx; }
};

// Per-level buffers (S = slots(), C = cells()), allocated by the caller on the kernel's device.
// Acc is double on the CPU and float on CUDA.
template <class Acc>
struct LossLevelBuffers {
  const void* pred = nullptr;    // (bs, na, ny, nx, no), the predictions' dtype
  int32_t* slot_cell = nullptr;  // [S] flat cell index ((b*na + a)*ny + gj)*nx + gi, or kNoCell
  int32_t* slot_cls = nullptr;   // [S] target class
  float* slot_tbox = nullptr;    // [S*4] target box relative to the cell (x, y, w, h)
  Acc* slot_iou = nullptr;       // [S] CIoU
  Acc* slot_dbox = nullptr;      // [S*4] d CIoU / d raw prediction (channels 0..3)
  int32_t* sorted_cell = nullptr;  // [S] slot cells in ascending order (kNoCell last)
  int32_t* sorted_slot = nullptr;  // [S] slot ids in that order (stable)
  Acc* tobj = nullptr;             // [C] objectness target
};

// The summary, doubles: per level l at 4*l: sum of (1 - CIoU), sum of class BCE, matched count,
// sum of objectness BCE; then the loss and its components and the first invalid target row.
constexpr int kSummaryBox = 4 * kLossMaxLevels;  // hyp box * sum over levels of mean(1 - CIoU)
constexpr int kSummaryObj = kSummaryBox + 1;     // hyp obj * sum of balance * mean objectness BCE
constexpr int kSummaryCls = kSummaryBox + 2;     // hyp cls * sum of mean class BCE
constexpr int kSummaryTotal = kSummaryBox + 3;   // (box + obj + cls) * bs
constexpr int kSummaryBadRow = kSummaryBox + 4;  // first invalid target row, -1 if none
constexpr int kSummarySize = kSummaryBox + 5;

// ---- shared per-element math ------------------------------------------------------------------

KESTREL_HD inline float k_floor(float x) { return floorf(x); }
KESTREL_HD inline double k_atan(double x) { return atan(x); }
KESTREL_HD inline float k_atan(float x) { return atanf(x); }
KESTREL_HD inline double k_log1p(double x) { return log1p(x); }
KESTREL_HD inline float k_log1p(float x) { return log1pf(x); }
KESTREL_HD inline double k_pow(double x, double y) { return pow(x, y); }
KESTREL_HD inline float k_pow(float x, float y) { return powf(x, y); }
template <class T> KESTREL_HD inline T k_max(T a, T b) { return a > b ? a : b; }
template <class T> KESTREL_HD inline T k_min(T a, T b) { return a < b ? a : b; }

// The share of a min/max's gradient that reaches `a` (ties split it in halves, as torch does).
template <class T> KESTREL_HD inline T dmin_da(T a, T b) { return a < b ? T(1) : (a == b ? T(0.5) : T(0)); }
template <class T> KESTREL_HD inline T dmax_da(T a, T b) { return a > b ? T(1) : (a == b ? T(0.5) : T(0)); }

// build_targets rounds a * b to float before any add (mul_rn, kernels/rounding.h: nvcc would
// contract a * b - c into an FMA): its cell choices and tbox must see the reference's rounded grid
// coordinates.

constexpr float kPaddingImage = -1.0f;
KESTREL_HD inline bool target_row_padding(const float* r) { return r[0] == kPaddingImage; }

KESTREL_HD inline bool target_row_valid(const float* r, int64_t bs, int64_t nc) {
  for (int k = 0; k < 6; ++k)
    if (!(r[k] - r[k] == 0.0f)) return false;  // NaN or infinite
  if (r[0] < 0 || r[0] >= float(bs) || k_floor(r[0]) != r[0]) return false;
  if (r[1] < 0 || r[1] >= float(nc) || k_floor(r[1]) != r[1]) return false;
  return r[2] >= 0 && r[2] <= 1 && r[3] >= 0 && r[3] <= 1 && r[4] >= 0 && r[5] >= 0;
}

// build_targets for slot (o, a) of a valid target row, in float32 as the reference: the anchor
// ratio test max(r, 1/r) < anchor_t, the neighbour conditions (fractional part < 0.5 and more
// than one cell from the border, on gxy for left/up and on the inverse gxi for right/down), the
// truncated and clamped cell, and the box relative to the clamped cell (the reference clamps gij
// in place before it forms tbox). Returns kNoCell when the slot is no match.
KESTREL_HD inline int32_t match_slot(const float* row, int o, int a, const LossLevel& lv,
                                     const LossConfig& c, int32_t* cls, float tbox[4]) {
  const float nx = float(lv.nx), ny = float(lv.ny);
  const float gx = mul_rn(row[2], nx), gy = mul_rn(row[3], ny);
  const float gw = mul_rn(row[4], nx), gh = mul_rn(row[5], ny);
  const float rw = gw / lv.anchors[2 * a], rh = gh / lv.anchors[2 * a + 1];
  const float worst = k_max(k_max(rw, 1.0f / rw), k_max(rh, 1.0f / rh));
  if (!(worst < c.anchor_t)) return kNoCell;
  float ox = 0, oy = 0;
  if (o != 0) {
    const float gxi = nx - gx, gyi = ny - gy;
    bool take = false;
    switch (o) {
      case 1: take = gx - k_floor(gx) < 0.5f && gx > 1; ox = 0.5f; break;
      case 2: take = gy - k_floor(gy) < 0.5f && gy > 1; oy = 0.5f; break;
      case 3: take = gxi - k_floor(gxi) < 0.5f && gxi > 1; ox = -0.5f; break;
      default: take = gyi - k_floor(gyi) < 0.5f && gyi > 1; oy = -0.5f; break;
    }
    if (!take) return kNoCell;
  }
  int64_t gi = static_cast<int64_t>(gx - ox), gj = static_cast<int64_t>(gy - oy);
  gi = gi < 0 ? 0 : (gi > lv.nx - 1 ? lv.nx - 1 : gi);
  gj = gj < 0 ? 0 : (gj > lv.ny - 1 ? lv.ny - 1 : gj);
  tbox[0] = gx - float(gi);
  tbox[1] = gy - float(gj);
  tbox[2] = gw;
  tbox[3] = gh;
  *cls = static_cast<int32_t>(row[1]);
  const int64_t b = static_cast<int64_t>(row[0]);
  return static_cast<int32_t>(((b * c.na + a) * lv.ny + gj) * lv.nx + gi);
}

// CIoU of box p against box t (both x, y, w, h; eps 1e-7 as the reference's bbox_iou) and its
// gradient w.r.t. p. The aspect weight alpha is a constant for the gradient (torch.no_grad there).
template <class T>
KESTREL_HD inline T ciou_with_grad(const T p[4], const T t[4], T grad[4]) {
  const T eps = T(1e-7);
  const T kv = T(0.4052847345693511);  // 4 / pi^2
  const T p_x1 = p[0] - p[2] / 2, p_x2 = p[0] + p[2] / 2, p_y1 = p[1] - p[3] / 2, p_y2 = p[1] + p[3] / 2;
  const T t_x1 = t[0] - t[2] / 2, t_x2 = t[0] + t[2] / 2, t_y1 = t[1] - t[3] / 2, t_y2 = t[1] + t[3] / 2;
  const T iw = k_min(p_x2, t_x2) - k_max(p_x1, t_x1), ih = k_min(p_y2, t_y2) - k_max(p_y1, t_y1);
  const T iwc = k_max(iw, T(0)), ihc = k_max(ih, T(0));
  const T inter = iwc * ihc;
  const T uni = p[2] * p[3] + t[2] * t[3] - inter + eps;
  const T iou = inter / uni;
  const T cw = k_max(p_x2, t_x2) - k_min(p_x1, t_x1), ch = k_max(p_y2, t_y2) - k_min(p_y1, t_y1);
  const T c2 = cw * cw + ch * ch + eps;
  const T dx = t_x1 + t_x2 - p_x1 - p_x2, dy = t_y1 + t_y2 - p_y1 - p_y2;
  const T rho2 = (dx * dx + dy * dy) / 4;
  const T rp = p[2] / p[3];
  const T at = k_atan(t[2] / t[3]) - k_atan(rp);
  const T v = kv * (at * at);
  const T alpha = v / (v - iou + (T(1) + eps));
  const T ciou = iou - (rho2 / c2 + v * alpha);

  // Reverse mode through the expression above, alpha held constant.
  const T g_rho2 = -T(1) / c2, g_c2 = rho2 / (c2 * c2), g_v = -alpha;
  const T g_at = g_v * kv * 2 * at;
  const T g_rp = g_at * (-T(1) / (T(1) + rp * rp));
  T g_w = g_rp / p[3], g_h = -g_rp * rp / p[3];
  const T g_inter_iou = T(1) / uni, g_uni = -inter / (uni * uni);
  g_w += g_uni * p[3];
  g_h += g_uni * p[2];
  const T g_inter = g_inter_iou - g_uni;
  const T g_iw = iw >= 0 ? g_inter * ihc : T(0), g_ih = ih >= 0 ? g_inter * iwc : T(0);
  const T g_cw = g_c2 * 2 * cw, g_ch = g_c2 * 2 * ch;
  const T g_dx = g_rho2 * dx / 2, g_dy = g_rho2 * dy / 2;
  const T g_x2 = g_iw * dmin_da(p_x2, t_x2) + g_cw * dmax_da(p_x2, t_x2) - g_dx;
  const T g_x1 = -g_iw * dmax_da(p_x1, t_x1) - g_cw * dmin_da(p_x1, t_x1) - g_dx;
  const T g_y2 = g_ih * dmin_da(p_y2, t_y2) + g_ch * dmax_da(p_y2, t_y2) - g_dy;
  const T g_y1 = -g_ih * dmax_da(p_y1, t_y1) - g_ch * dmin_da(p_y1, t_y1) - g_dy;
  grad[0] = g_x1 + g_x2;
  grad[1] = g_y1 + g_y2;
  grad[2] = g_w + (g_x2 - g_x1) / 2;
  grad[3] = g_h + (g_y2 - g_y1) / 2;
  return ciou;
}

// The box term of one matched slot from the raw predictions r[0..3]: xy = 2 sigmoid - 0.5,
// wh = (2 sigmoid)^2 * anchor. Returns CIoU; draw = d CIoU / d r.
template <class T>
KESTREL_HD inline T box_ciou(const T r[4], T aw, T ah, const float tb[4], T draw[4]) {
  T s[4], p[4], g[4];
  for (int k = 0; k < 4; ++k) s[k] = sigmoid_fn(r[k]);
  p[0] = s[0] * 2 - T(0.5);
  p[1] = s[1] * 2 - T(0.5);
  const T qw = s[2] * 2, qh = s[3] * 2;
  p[2] = qw * qw * aw;
  p[3] = qh * qh * ah;
  const T t[4] = {T(tb[0]), T(tb[1]), T(tb[2]), T(tb[3])};
  const T ciou = ciou_with_grad(p, t, g);
  draw[0] = g[0] * 2 * s[0] * (1 - s[0]);
  draw[1] = g[1] * 2 * s[1] * (1 - s[1]);
  draw[2] = g[2] * aw * 2 * qw * 2 * s[2] * (1 - s[2]);
  draw[3] = g[3] * ah * 2 * qh * 2 * s[3] * (1 - s[3]);
  return ciou;
}

// BCE with logits and pos_weight pw, as torch: (1 - t) x + (1 + (pw - 1) t) softplus(-x); with
// gamma > 0 wrapped in the reference's FocalLoss (alpha 0.25): times alpha_t (1 - p_t)^gamma.
// Returns the loss; *dx = d loss / d x.
template <class T>
KESTREL_HD inline T bce_term(T x, T t, T pw, T gamma, T* dx) {
  const T lw = T(1) + (pw - T(1)) * t;
  const T softplus_neg = k_max(-x, T(0)) + k_log1p(k_exp(-(x < 0 ? -x : x)));
  const T bce = (T(1) - t) * x + lw * softplus_neg;
  const T p = sigmoid_fn(x);
  const T dbce = lw * p - pw * t;
  if (!(gamma > 0)) {
    *dx = dbce;
    return bce;
  }
  const T p_t = t * p + (T(1) - t) * (T(1) - p);
  const T af = t * T(0.25) + (T(1) - t) * T(0.75);
  const T m = k_pow(T(1) - p_t, gamma);
  const T dm = gamma * k_pow(T(1) - p_t, gamma - T(1)) * (-(2 * t - T(1)) * p * (T(1) - p));
  *dx = af * (dbce * m + bce * dm);
  return bce * (af * m);
}

// Level means, balance and gains from the per-level sums of the summary (a level without matches
// adds no box or class loss, as the reference skips it); returns the loss.
KESTREL_HD inline double combine_summary(double* sm, const LossConfig& c, const LossLevel* levels,
                                         int nl) {
  double box = 0, obj = 0, cls = 0;
  for (int l = 0; l < nl; ++l) {
    const double n = sm[4 * l + 2];
    if (n > 0) {
      box += sm[4 * l] / n;
      if (c.nc > 1) cls += sm[4 * l + 1] / (n * double(c.nc));
    }
    obj += levels[l].balance * (sm[4 * l + 3] / double(levels[l].cells(c)));
  }
  sm[kSummaryBox] = box * c.box_gain;
  sm[kSummaryObj] = obj * c.obj_gain;
  sm[kSummaryCls] = cls * c.cls_gain;
  sm[kSummaryTotal] = (sm[kSummaryBox] + sm[kSummaryObj] + sm[kSummaryCls]) * double(c.bs);
  return sm[kSummaryTotal];
}

// Scale of each per-element derivative in d loss / d pred for level l: box (per dCIoU), class
// (per element BCE), objectness (per cell BCE), for an incoming loss gradient g.
struct LossGradScales {
  double box = 0, cls = 0, obj = 0;
};
KESTREL_HD inline LossGradScales loss_grad_scales(const double* sm, const LossConfig& c,
                                                  const LossLevel& lv, int l, double g) {
  LossGradScales s;
  const double n = sm[4 * l + 2], bs = double(c.bs);
  if (n > 0) {
    s.box = -c.box_gain * bs * g / n;
    if (c.nc > 1) s.cls = c.cls_gain * bs * g / (n * double(c.nc));
  }
  s.obj = c.obj_gain * lv.balance * bs * g / double(lv.cells(c));
  return s;
}

// ---- entry points -----------------------------------------------------------------------------
// targets: [nt, 6] float32 on the kernel's device. t: the predictions' dtype (float/double on the
// CPU; float/half/bfloat16 on CUDA). summary: kSummarySize doubles (host memory on the CPU, device
// memory on CUDA). total: the 0-d loss, float32 (float64 for float64 predictions on the CPU).

void yolo_loss_forward_cpu(DType t, const LossConfig& c, const LossLevel* levels,
                           const LossLevelBuffers<double>* bufs, int nl, const float* targets,
                           double* summary, void* total);
// grads[l]: d loss / d pred of level l (its shape and dtype), each element written once.
void yolo_loss_backward_cpu(DType t, const LossConfig& c, const LossLevel* levels,
                            const LossLevelBuffers<double>* bufs, int nl, const double* summary,
                            double grad_total, void* const* grads);

// Device workspace for yolo_loss_forward_cuda (sort scratch, partial sums, slot ids).
size_t yolo_loss_cuda_workspace_bytes(const LossConfig& c, const LossLevel* levels, int nl);
void yolo_loss_forward_cuda(DType t, const LossConfig& c, const LossLevel* levels,
                            const LossLevelBuffers<float>* bufs, int nl, const float* targets,
                            double* summary, float* total, void* workspace, cudaStream_t stream);
// grad_total: device pointer to the float32 gradient of the loss.
void yolo_loss_backward_cuda(DType t, const LossConfig& c, const LossLevel* levels,
                             const LossLevelBuffers<float>* bufs, int nl, const double* summary,
                             const float* grad_total, void* const* grads, cudaStream_t stream);

}  // namespace kestrel::kernels
