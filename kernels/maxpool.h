// 2-d max pooling on NHWC tensors with a square window (YOLOv5's SPPF: kernel 5, stride 1,
// padding 2, three times in a row). PyTorch semantics: padding acts as -infinity (it never wins),
// the output is [n, (h + 2 pad - kernel) / stride + 1, (w + ...) / stride + 1, c], and a NaN in
// a window makes that output NaN.
//
// The argmax is defined the same way on every device: the window is scanned in row-major order
// (kh outer, kw inner) and the first maximum wins, so on ties (a constant input) the gradient
// goes to the earliest element of the window; a NaN beats any number, and the first NaN wins.
// Forward records each output's window index (kh * kernel + kw, one byte) for backward, which
// gathers per input element the gradients of the windows that chose it: no atomics, and a fixed
// summation order (row-major over the windows).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

// Window indices are stored in one byte.
constexpr int64_t kMaxPoolKernelLimit = 16;

struct PoolShape {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input, NHWC
  int64_t kernel = 1, stride = 1, pad = 0;
  int64_t out_h = 0, out_w = 0;
};

// Output size of one spatial dimension; needs in + 2 pad >= kernel.
inline int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  return (in + 2 * pad - kernel) / stride + 1;
}

// Whether v replaces the running maximum during the scan: strictly greater (ties keep the earlier
// element), or the first NaN.
template <class A>
KESTREL_HD inline bool pool_replaces(A v, A best) {
  return v > best || (v != v && best == best);
}

template <class I>
struct PoolChoice {
  I input;     // flat NHWC index of the chosen input element
  int window;  // kh * kernel + kw
};

// The argmax of output element (n, oh, ow, c). Padding positions are skipped; pad <= kernel / 2
// guarantees every window holds at least one input element.
template <class T, class I>
KESTREL_HD inline PoolChoice<I> maxpool_choose(const T* x, const PoolShape& s, I n, I oh, I ow,
                                               I c) {
  const I H = I(s.h), W = I(s.w), C = I(s.c), K = I(s.kernel);
  const I h0 = oh * I(s.stride) - I(s.pad), w0 = ow * I(s.stride) - I(s.pad);
  const I kh_begin = h0 < 0 ? -h0 : 0, kh_end = H - h0 < K ? H - h0 : K;
  const I kw_begin = w0 < 0 ? -w0 : 0, kw_end = W - w0 < K ? W - w0 : K;
  PoolChoice<I> best{0, -1};
  acc_t<T> best_v = acc_t<T>(0);
  for (I kh = kh_begin; kh < kh_end; ++kh) {
    for (I kw = kw_begin; kw < kw_end; ++kw) {
      const I i = ((n * H + h0 + kh) * W + w0 + kw) * C + c;
      const acc_t<T> v = to_acc(x[i]);
      if (best.window < 0 || pool_replaces(v, best_v)) {
        best = {i, int(kh * K + kw)};
        best_v = v;
      }
    }
  }
  return best;
}

// The gradient of input element (n, h, w, c): the sum, over the windows containing it in
// row-major order, of the output gradients whose recorded argmax is this element.
template <class T, class I>
KESTREL_HD inline acc_t<T> maxpool_input_grad(const T* dy, const uint8_t* window,
                                              const PoolShape& s, I n, I h, I w, I c) {
  const I S = I(s.stride), P = I(s.pad), K = I(s.kernel), OH = I(s.out_h), OW = I(s.out_w),
          C = I(s.c);
  // Window oh covers rows [oh S - P, oh S - P + K), so it contains h for
  // ceil((h + P - K + 1) / S) <= oh <= floor((h + P) / S).
  const I lo_h = h + P - K + 1, lo_w = w + P - K + 1;
  const I oh_begin = lo_h <= 0 ? 0 : (lo_h + S - 1) / S;
  const I ow_begin = lo_w <= 0 ? 0 : (lo_w + S - 1) / S;
  const I oh_end = (h + P) / S + 1 < OH ? (h + P) / S + 1 : OH;
  const I ow_end = (w + P) / S + 1 < OW ? (w + P) / S + 1 : OW;
  acc_t<T> sum = acc_t<T>(0);
  for (I oh = oh_begin; oh < oh_end; ++oh) {
    for (I ow = ow_begin; ow < ow_end; ++ow) {
      const I o = ((n * OH + oh) * OW + ow) * C + c;
      const I local = (h - (oh * S - P)) * K + (w - (ow * S - P));
      if (I(window[o]) == local) sum += to_acc(dy[o]);
    }
  }
  return sum;
}

// y [n, out_h, out_w, c] (each output a copy of its chosen input element); window, if not null,
// receives each output's window index for backward. CPU: float, double and bfloat16; CUDA:
// float, half and bfloat16.
void maxpool2d_forward_cpu(DType t, const void* x, void* y, uint8_t* window, const PoolShape& s);
void maxpool2d_forward_cuda(DType t, const void* x, void* y, uint8_t* window, const PoolShape& s,
                            cudaStream_t stream);

// dx [n, h, w, c] from dy [n, out_h, out_w, c] and forward's window indices; bfloat16 and half
// sum in float and round once.
void maxpool2d_backward_cpu(DType t, const void* dy, const uint8_t* window, void* dx,
                            const PoolShape& s);
void maxpool2d_backward_cuda(DType t, const void* dy, const uint8_t* window, void* dx,
                             const PoolShape& s, cudaStream_t stream);

}  // namespace kestrel::kernels
