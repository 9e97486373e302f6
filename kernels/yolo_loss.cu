// CUDA version of the YOLOv5 loss: one thread per slot, cell or element, float math, double
// partial sums reduced in a fixed tree order (the grid depends only on the shape), slots grouped
// by cell with CUB's stable radix sort. No floating-point atomics: results are reproducible run
// to run and follow the CPU reference's summation orders where it matters (runs of one cell).
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/yolo_loss.h"

namespace kestrel::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPartialBlocks = 256;
constexpr int kNoBadRow = 0x7F7F7F7F;  // what a 0x7F byte fill leaves; rows are fewer than that

// Blocks of a partial-sum pass over n items: a function of n only, so the sums' order is fixed.
KESTREL_HD inline int partial_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxPartialBlocks ? kMaxPartialBlocks : b));
}

// Sums kVals doubles over the block in a fixed tree order; thread 0 gets the result in out.
template <int kVals>
__device__ void block_sum(double (&v)[kVals], double* out) {
  __shared__ double sh[kVals][kThreads];
  for (int k = 0; k < kVals; ++k) sh[k][threadIdx.x] = v[k];
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      for (int k = 0; k < kVals; ++k) sh[k][threadIdx.x] += sh[k][threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int k = 0; k < kVals; ++k) out[k] = sh[k][0];
}

// Workspace: [bad row int32 | pad][slot ids int32, S][partials, nl x 4 x kMaxPartialBlocks][CUB]
struct Workspace {
  size_t ids = 0, partials = 0, sort = 0, sort_bytes = 0, total = 0;
};

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

Workspace layout(const LossConfig& c, int nl) {
  Workspace w;
  const int64_t S = c.slots();
  w.ids = 256;
  w.partials = w.ids + align256(sizeof(int32_t) * std::max<int64_t>(S, 1));
  w.sort = w.partials + align256(sizeof(double) * 4 * kMaxPartialBlocks * nl);
  KESTREL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, w.sort_bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), std::max<int64_t>(S, 1)));
  w.total = w.sort + align256(w.sort_bytes);
  return w;
}

__global__ void match_kernel(LossConfig c, LossLevel lv, LossLevelBuffers<float> b,
                             const float* targets, int32_t* ids, int* bad_row) {
  const int64_t S = c.slots();
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S;
       s += int64_t(gridDim.x) * blockDim.x) {
    const int o = static_cast<int>(s / (c.na * c.nt));
    const int a = static_cast<int>((s / c.nt) % c.na);
    const int64_t t = s % c.nt;
    const float* row = targets + 6 * t;
    int32_t cell = kNoCell;
    if (target_row_valid(row, c.bs, c.nc))
      cell = match_slot(row, o, a, lv, c, &b.slot_cls[s], &b.slot_tbox[4 * s]);
    else if (o == 0 && a == 0 && !target_row_padding(row))
      atomicMin(bad_row, static_cast<int>(t));
    b.slot_cell[s] = cell;
    ids[s] = static_cast<int32_t>(s);
  }
}

template <class T>
__global__ void slot_terms_kernel(LossConfig c, LossLevel lv, LossLevelBuffers<float> b,
                                  double* partials) {
  const int64_t S = c.slots(), no = c.no();
  const T* pred = static_cast<const T*>(b.pred);
  const float cp = to_acc(from_acc<T>(float(c.cp))), cn = to_acc(from_acc<T>(float(c.cn)));
  double v[3] = {0, 0, 0};  // sum of (1 - CIoU), class BCE, count
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S;
       s += int64_t(gridDim.x) * blockDim.x) {
    const int32_t cell = b.slot_cell[s];
    if (cell == kNoCell) continue;
    const int a = static_cast<int>((s / c.nt) % c.na);
    const T* x = pred + int64_t(cell) * no;
    const float r[4] = {to_acc(x[0]), to_acc(x[1]), to_acc(x[2]), to_acc(x[3])};
    float draw[4];
    const float ciou = box_ciou(r, lv.anchors[2 * a], lv.anchors[2 * a + 1], &b.slot_tbox[4 * s], draw);
    b.slot_iou[s] = ciou;
    for (int k = 0; k < 4; ++k) b.slot_dbox[4 * s + k] = draw[k];
    v[0] += double(1.0f - ciou);
    v[2] += 1;
    if (c.nc > 1) {
      for (int64_t k = 0; k < c.nc; ++k) {
        float d;
        v[1] += double(bce_term(to_acc(x[5 + k]), k == b.slot_cls[s] ? cp : cn, float(c.cls_pw),
                                float(c.fl_gamma), &d));
      }
    }
  }
  block_sum(v, partials + 3 * blockIdx.x);
}

// The objectness target, in the predictions' dtype as the reference's tobj.
template <class T>
void scatter_tobj(const LossConfig& c, const LossLevelBuffers<float>& b, cudaStream_t stream) {
  const int64_t S = c.slots();
  const int32_t* sorted_cell = b.sorted_cell;
  const int32_t* sorted_slot = b.sorted_slot;
  const float* iou = b.slot_iou;
  float* tobj = b.tobj;
  cuda::launch_map(S, stream, [=] __device__(int64_t p) {
    const int32_t cell = sorted_cell[p];
    if (cell == kNoCell || (p + 1 < S && sorted_cell[p + 1] == cell)) return;
    tobj[cell] = to_acc(from_acc<T>(fmaxf(iou[sorted_slot[p]], 0.0f)));
  });
}

template <class T>
__global__ void objectness_kernel(LossConfig c, LossLevel lv, LossLevelBuffers<float> b,
                                  double* partials) {
  const int64_t C = lv.cells(c), no = c.no();
  const T* pred = static_cast<const T*>(b.pred);
  double v[1] = {0};
  for (int64_t cell = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; cell < C;
       cell += int64_t(gridDim.x) * blockDim.x) {
    float d;
    v[0] += double(bce_term(to_acc(pred[cell * no + 4]), b.tobj[cell], float(c.obj_pw),
                            float(c.fl_gamma), &d));
  }
  block_sum(v, partials + blockIdx.x);
}

struct LevelArray {
  LossLevel l[kLossMaxLevels];
};

// One block: the partial sums of every level in a fixed order, then the loss.
__global__ void combine_kernel(LossConfig c, LevelArray levels, int nl, const double* partials,
                               const int* bad_row, double* summary, float* total) {
  for (int l = 0; l < nl; ++l) {
    const double* part = partials + size_t(l) * 4 * kMaxPartialBlocks;
    const int nb_slots = partial_blocks(c.slots()), nb_cells = partial_blocks(levels.l[l].cells(c));
    double v[4] = {0, 0, 0, 0};
    for (int i = threadIdx.x; i < nb_slots; i += blockDim.x)
      for (int k = 0; k < 3; ++k) v[k] += part[3 * i + k];
    for (int i = threadIdx.x; i < nb_cells; i += blockDim.x) v[3] += part[3 * kMaxPartialBlocks + i];
    block_sum(v, summary + 4 * l);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    summary[kSummaryBadRow] = *bad_row == kNoBadRow ? -1.0 : double(*bad_row);
    *total = float(combine_summary(summary, c, levels.l, nl));
  }
}

template <class T>
void backward_level(const LossConfig& c, const LossLevel& lv, int l, const LossLevelBuffers<float>& b,
                    const double* summary, const float* grad_total, T* grad, cudaStream_t stream) {
  const int64_t S = c.slots(), C = lv.cells(c), no = c.no();
  const T* pred = static_cast<const T*>(b.pred);
  const float* tobj = b.tobj;
  const LossConfig cc = c;
  const LossLevel lvc = lv;
  // Dense pass: every element, objectness gradient on channel 4 and zero elsewhere.
  cuda::launch_map(C * no, stream, [=] __device__(int64_t e) {
    const int64_t ch = e % no;
    if (ch != 4) {
      grad[e] = from_acc<T>(0.0f);
      return;
    }
    const LossGradScales sc = loss_grad_scales(summary, cc, lvc, l, double(*grad_total));
    float d;
    bce_term(to_acc(pred[e]), tobj[e / no], float(cc.obj_pw), float(cc.fl_gamma), &d);
    grad[e] = from_acc<T>(float(sc.obj) * d);
  });
  if (S == 0) return;
  // Sparse pass: the first position of each cell's run sums its slots in slot order.
  const int32_t* sorted_cell = b.sorted_cell;
  const int32_t* sorted_slot = b.sorted_slot;
  const int32_t* slot_cls = b.slot_cls;
  const float* slot_dbox = b.slot_dbox;
  const float cp = to_acc(from_acc<T>(float(c.cp))), cn = to_acc(from_acc<T>(float(c.cn)));
  cuda::launch_map(S * no, stream, [=] __device__(int64_t e) {
    const int64_t p = e / no, ch = e % no;
    const int32_t cell = sorted_cell[p];
    if (ch == 4 || (ch > 4 && cc.nc == 1) || cell == kNoCell) return;
    if (p > 0 && sorted_cell[p - 1] == cell) return;
    const LossGradScales sc = loss_grad_scales(summary, cc, lvc, l, double(*grad_total));
    const float x = to_acc(pred[int64_t(cell) * no + ch]);
    float g = 0;
    for (int64_t q = p; q < S && sorted_cell[q] == cell; ++q) {
      const int32_t s = sorted_slot[q];
      if (ch < 4) {
        g += float(sc.box) * slot_dbox[4 * int64_t(s) + ch];
      } else {
        float d;
        bce_term(x, ch - 5 == slot_cls[s] ? cp : cn, float(cc.cls_pw), float(cc.fl_gamma), &d);
        g += float(sc.cls) * d;
      }
    }
    grad[int64_t(cell) * no + ch] = from_acc<T>(g);
  });
}

}  // namespace

size_t yolo_loss_cuda_workspace_bytes(const LossConfig& c, const LossLevel*, int nl) {
  return layout(c, nl).total;
}

void yolo_loss_forward_cuda(DType t, const LossConfig& c, const LossLevel* levels,
                            const LossLevelBuffers<float>* bufs, int nl, const float* targets,
                            double* summary, float* total, void* workspace, cudaStream_t stream) {
  KESTREL_CHECK(nl >= 1 && nl <= kLossMaxLevels, "yolo loss: ", nl, " levels, supported 1..",
                kLossMaxLevels);
  const Workspace w = layout(c, nl);
  char* ws = static_cast<char*>(workspace);
  int* bad_row = reinterpret_cast<int*>(ws);
  int32_t* ids = reinterpret_cast<int32_t*>(ws + w.ids);
  double* partials = reinterpret_cast<double*>(ws + w.partials);
  const int64_t S = c.slots();
  KESTREL_CUDA_CHECK(cudaMemsetAsync(bad_row, 0x7F, sizeof(int), stream));
  LevelArray arr;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "yolo loss", {
    for (int l = 0; l < nl; ++l) {
      const LossLevel& lv = levels[l];
      const LossLevelBuffers<float>& b = bufs[l];
      arr.l[l] = lv;
      double* part = partials + size_t(l) * 4 * kMaxPartialBlocks;
      if (S > 0) {
        match_kernel<<<cuda::blocks_for(S), kThreads, 0, stream>>>(c, lv, b, targets, ids, bad_row);
        KESTREL_CUDA_CHECK_LAUNCH();
      }
      slot_terms_kernel<T><<<partial_blocks(S), kThreads, 0, stream>>>(c, lv, b, part);
      KESTREL_CUDA_CHECK_LAUNCH();
      if (S > 0) {
        size_t bytes = w.sort_bytes;
        KESTREL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + w.sort, bytes, b.slot_cell,
                                                           b.sorted_cell, ids, b.sorted_slot, S, 0,
                                                           32, stream));
      }
      KESTREL_CUDA_CHECK(cudaMemsetAsync(b.tobj, 0, sizeof(float) * lv.cells(c), stream));
      scatter_tobj<T>(c, b, stream);
      objectness_kernel<T><<<partial_blocks(lv.cells(c)), kThreads, 0, stream>>>(
          c, lv, b, part + 3 * kMaxPartialBlocks);
      KESTREL_CUDA_CHECK_LAUNCH();
    }
  });
  combine_kernel<<<1, kThreads, 0, stream>>>(c, arr, nl, partials, bad_row, summary, total);
  KESTREL_CUDA_CHECK_LAUNCH();
}

void yolo_loss_backward_cuda(DType t, const LossConfig& c, const LossLevel* levels,
                             const LossLevelBuffers<float>* bufs, int nl, const double* summary,
                             const float* grad_total, void* const* grads, cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "yolo loss backward", {
    for (int l = 0; l < nl; ++l)
      backward_level<T>(c, levels[l], l, bufs[l], summary, grad_total, static_cast<T*>(grads[l]),
                        stream);
  });
}

}  // namespace kestrel::kernels
