// CPU reference of the YOLOv5 loss: plain loops in the predictions' precision (float or double),
// double accumulators for the sums. Same steps and orders as the CUDA version (see the header).
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/yolo_loss.h"

namespace kestrel::kernels {
namespace {

template <class T>
void forward_level(const LossConfig& c, const LossLevel& lv, const LossLevelBuffers<double>& b,
                   const float* targets, const std::vector<char>& row_ok, double* sums) {
  const int64_t S = c.slots(), C = lv.cells(c), no = c.no();
  const T* pred = static_cast<const T*>(b.pred);

  // 1. build_targets, slot by slot in the reference's order (offset, anchor, target).
  for (int64_t s = 0; s < S; ++s) {
    const int o = static_cast<int>(s / (c.na * c.nt));
    const int a = static_cast<int>((s / c.nt) % c.na);
    const int64_t t = s % c.nt;
    b.slot_cell[s] = kNoCell;
    if (row_ok[t])
      b.slot_cell[s] = match_slot(targets + 6 * t, o, a, lv, c, &b.slot_cls[s], &b.slot_tbox[4 * s]);
  }

  // 2. CIoU and class BCE of every matched slot.
  double box = 0, cls = 0, count = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (b.slot_cell[s] == kNoCell) continue;
    const int a = static_cast<int>((s / c.nt) % c.na);
    const T* x = pred + int64_t(b.slot_cell[s]) * no;
    T draw[4];
    const T ciou = box_ciou(x, T(lv.anchors[2 * a]), T(lv.anchors[2 * a + 1]), &b.slot_tbox[4 * s], draw);
    b.slot_iou[s] = ciou;
    for (int k = 0; k < 4; ++k) b.slot_dbox[4 * s + k] = draw[k];
    box += double(T(1) - ciou);
    count += 1;
    if (c.nc > 1) {
      for (int64_t k = 0; k < c.nc; ++k) {
        T d;
        const T tk = k == b.slot_cls[s] ? T(c.cp) : T(c.cn);
        cls += double(bce_term(x[5 + k], tk, T(c.cls_pw), T(c.fl_gamma), &d));
      }
    }
  }

  // 3. Slots grouped by cell, ascending slot order within a cell.
  std::iota(b.sorted_slot, b.sorted_slot + S, 0);
  std::stable_sort(b.sorted_slot, b.sorted_slot + S,
                   [&](int32_t i, int32_t j) { return b.slot_cell[i] < b.slot_cell[j]; });
  for (int64_t p = 0; p < S; ++p) b.sorted_cell[p] = b.slot_cell[b.sorted_slot[p]];

  // 4. The last slot of each cell's run sets its objectness target.
  std::fill(b.tobj, b.tobj + C, 0.0);
  for (int64_t p = 0; p < S; ++p) {
    const int32_t cell = b.sorted_cell[p];
    if (cell == kNoCell) break;
    if (p + 1 < S && b.sorted_cell[p + 1] == cell) continue;
    b.tobj[cell] = k_max(T(b.slot_iou[b.sorted_slot[p]]), T(0));
  }

  // 5. Objectness BCE over every cell.
  double obj = 0;
  for (int64_t cell = 0; cell < C; ++cell) {
    T d;
    obj += double(bce_term(pred[cell * no + 4], T(b.tobj[cell]), T(c.obj_pw), T(c.fl_gamma), &d));
  }
  sums[0] = box;
  sums[1] = cls;
  sums[2] = count;
  sums[3] = obj;
}

template <class T>
void backward_level(const LossConfig& c, const LossLevel& lv, const LossLevelBuffers<double>& b,
                    const LossGradScales& sc, T* grad) {
  const int64_t S = c.slots(), C = lv.cells(c), no = c.no();
  const T* pred = static_cast<const T*>(b.pred);
  for (int64_t cell = 0; cell < C; ++cell) {
    for (int64_t ch = 0; ch < no; ++ch) grad[cell * no + ch] = T(0);
    T d;
    bce_term(pred[cell * no + 4], T(b.tobj[cell]), T(c.obj_pw), T(c.fl_gamma), &d);
    grad[cell * no + 4] = T(sc.obj) * d;
  }
  for (int64_t p = 0; p < S; ++p) {
    const int32_t cell = b.sorted_cell[p];
    if (cell == kNoCell) break;
    if (p > 0 && b.sorted_cell[p - 1] == cell) continue;
    int64_t end = p;
    while (end < S && b.sorted_cell[end] == cell) ++end;
    const T* x = pred + int64_t(cell) * no;
    for (int64_t ch = 0; ch < no; ++ch) {
      if (ch == 4 || (ch > 4 && c.nc == 1)) continue;
      T g = 0;
      for (int64_t q = p; q < end; ++q) {
        const int32_t s = b.sorted_slot[q];
        if (ch < 4) {
          g += T(sc.box) * T(b.slot_dbox[4 * int64_t(s) + ch]);
        } else {
          T d;
          const T tk = ch - 5 == b.slot_cls[s] ? T(c.cp) : T(c.cn);
          bce_term(x[ch], tk, T(c.cls_pw), T(c.fl_gamma), &d);
          g += T(sc.cls) * d;
        }
      }
      grad[int64_t(cell) * no + ch] = g;
    }
  }
}

}  // namespace

void yolo_loss_forward_cpu(DType t, const LossConfig& c, const LossLevel* levels,
                           const LossLevelBuffers<double>* bufs, int nl, const float* targets,
                           double* summary, void* total) {
  std::fill(summary, summary + kSummarySize, 0.0);
  summary[kSummaryBadRow] = -1;
  std::vector<char> row_ok(c.nt);
  for (int64_t r = 0; r < c.nt; ++r) {
    row_ok[r] = target_row_valid(targets + 6 * r, c.bs, c.nc);
    if (!row_ok[r] && !target_row_padding(targets + 6 * r) && summary[kSummaryBadRow] < 0)
      summary[kSummaryBadRow] = double(r);
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "yolo loss", {
    for (int l = 0; l < nl; ++l)
      forward_level<T>(c, levels[l], bufs[l], targets, row_ok, summary + 4 * l);
    *static_cast<T*>(total) = T(combine_summary(summary, c, levels, nl));
  });
}

void yolo_loss_backward_cpu(DType t, const LossConfig& c, const LossLevel* levels,
                            const LossLevelBuffers<double>* bufs, int nl, const double* summary,
                            double grad_total, void* const* grads) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "yolo loss backward", {
    for (int l = 0; l < nl; ++l)
      backward_level<T>(c, levels[l], bufs[l],
                        loss_grad_scales(summary, c, levels[l], l, grad_total),
                        static_cast<T*>(grads[l]));
  });
}

}  // namespace kestrel::kernels
