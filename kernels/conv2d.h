// 2-D convolution (dilation 1, one group): NHWC activations, OHWI filters, optional bias.
//
//   y[n, oh, ow, o] = bias[o] + sum_{ki, kj, c} x[n, oh*sh - ph + ki, ow*sw - pw + kj, c]
//                                               * w[o, ki, kj, c]
//
// with x read as zero outside the image. The CPU reference lowers it to GEMMs over the im2col
// matrix of one image at a time, (OH*OW) x (KH*KW*C), whose column order matches the OHWI filter
// viewed as O x (KH*KW*C); the engine runs it for float64 (the gradient checks' ground truth),
// while float32 on the CPU goes through oneDNN (kernels/conv2d_dnnl.h). CUDA runs cuDNN, with the algorithm of each pass chosen by cuDNN's
// heuristics at a configuration's first sight and by timing when it repeats (conv_algo_cache.h),
// and its own deterministic kernels for the bias.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/dtype.h"

namespace kestrel::kernels {

// Output length of one spatial dimension; 0 when the padded input is shorter than the kernel
// (plain integer division would round that negative span up to a bogus positive size).
KESTREL_HD inline int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  const int64_t span = in + 2 * pad - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

struct Conv2dShape {
  int64_t n = 1, h = 1, w = 1, c = 1;  // input  [N, H, W, C]
  int64_t o = 1, kh = 1, kw = 1;       // filter [O, KH, KW, C]
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;

  KESTREL_HD int64_t out_h() const { return conv_out_size(h, kh, stride_h, pad_h); }
  KESTREL_HD int64_t out_w() const { return conv_out_size(w, kw, stride_w, pad_w); }
  // Length of one im2col row = one filter's elements = the GEMM reduction for the forward pass.
  KESTREL_HD int64_t patch() const { return kh * kw * c; }
  // Input row / column that filter tap ki / kj of output row oh / column ow reads (may fall in
  // the padding: < 0 or >= h / w).
  KESTREL_HD int64_t in_row(int64_t oh, int64_t ki) const { return oh * stride_h - pad_h + ki; }
  KESTREL_HD int64_t in_col(int64_t ow, int64_t kj) const { return ow * stride_w - pad_w + kj; }
};

// ---- CPU reference (float and double; contiguous buffers) --------------------------------------
// y = conv(x, w) + bias; bias may be null.
void conv2d_forward_cpu(DType t, const Conv2dShape& s, const void* x, const void* w,
                        const void* bias, void* y);
// dx = d(sum y * dy)/dx: the transposed convolution of dy with w.
void conv2d_backward_data_cpu(DType t, const Conv2dShape& s, const void* dy, const void* w,
                              void* dx);
// dw = sum over images of dy^T . im2col(x).
void conv2d_backward_filter_cpu(DType t, const Conv2dShape& s, const void* x, const void* dy,
                                void* dw);
// db[c] = sum_r dy[r, c] over the NHWC gradient viewed as rows = N*OH*OW, channels = O.
void conv2d_backward_bias_cpu(DType t, int64_t rows, int64_t channels, const void* dy, void* db);

// ---- CUDA (float, half, bfloat16 data; float accumulation) -------------------------------------
enum class ConvPass { Forward, BackwardData, BackwardFilter };
const char* conv_pass_name(ConvPass pass);

// The cuDNN algorithm chosen for one pass of one configuration.
struct Conv2dAlgo {
  int algo = 0;       // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the pass
  int math_type = 0;  // cudnnMathType_t to run it with
  size_t workspace_bytes = 0;
  bool deterministic = true;  // false only when cuDNN offered no deterministic algorithm
  std::string name;           // e.g. "implicit_precomp_gemm", for logs and benchmark labels
};

// Every CUDA pass takes its buffers in this order (all contiguous, 16-byte aligned):
//   Forward:        in0 = x,  in1 = w,  out = y
//   BackwardData:   in0 = dy, in1 = w,  out = dx
//   BackwardFilter: in0 = x,  in1 = dy, out = dw
// allow_tf32 lets float32 data run on TF32 tensor cores (10-bit mantissa products); it has no
// effect on half types, which always use tensor cores with float accumulation.

// How a pass may compute: allow_tf32 as above; deterministic: only algorithms that give the same
// bits every run (no atomics), chosen without timing (an error naming the configuration when
// cuDNN has none for it).
struct ConvMath {
  bool allow_tf32 = false;
  bool deterministic = false;
};

// What the current device runs this configuration with now, if anything is remembered for it.
std::optional<Conv2dAlgo> conv2d_cached_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s,
                                                  const ConvMath& m);
// Times cuDNN's algorithms for the pass on these buffers (overwriting `out`), with `scratch`
// (scratch_bytes of device memory, may be null) bounding the workspace an algorithm may use;
// returns the fastest deterministic one (the fastest of any kind if cuDNN offers no deterministic
// algorithm and m.deterministic is off). Blocks the host until the timing runs have finished.
// Remembers nothing: conv2d_algo_cuda decides when to search and what to keep.
Conv2dAlgo conv2d_time_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m,
                                 const void* in0, const void* in1, void* out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream);
// cuDNN's heuristic ranking for the pass (nothing runs): the best-ranked algorithm that works
// within `max_workspace` bytes, deterministic when m.deterministic (else deterministic ones first).
Conv2dAlgo conv2d_ranked_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m,
                                   size_t max_workspace, cudaStream_t stream);
struct TimedChoice;  // kernels/conv_algo_cache.h
// The algorithm for the pass by the rules of kernels/conv_algo_cache.h, on the process's cache for
// the current device: the ranking at a first sight, `timed_search` (which wraps
// conv2d_time_algo_cuda with buffers it owns) when a configuration repeats.
Conv2dAlgo conv2d_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m,
                            size_t max_workspace, const std::function<TimedChoice()>& timed_search,
                            cudaStream_t stream);
struct ConvAlgoStats;  // kernels/conv_algo_cache.h
ConvAlgoStats conv2d_algo_stats();
// Runs the pass with `algo`: out = result, or out += result with accumulate, computed in float
// and rounded once. workspace holds algo.workspace_bytes (may be null when that is 0).
void conv2d_run_cuda(ConvPass pass, DType t, const Conv2dShape& s, const Conv2dAlgo& algo,
                     const void* in0, const void* in1, void* out, bool accumulate,
                     void* workspace, cudaStream_t stream);

// y[r, c] = bias[c] over y viewed as rows x channels (NHWC: rows = N*OH*OW). The forward pass
// then accumulates the convolution onto it, so the output is rounded once, not twice.
void conv2d_fill_bias_cuda(DType t, int64_t rows, int64_t channels, const void* bias, void* y,
                           cudaStream_t stream);
// Float partial sums conv2d_backward_bias_cuda needs as workspace for this shape.
int64_t conv2d_bias_grad_partials(int64_t rows, int64_t channels);
// db[c] = sum_r dy[r, c], in a fixed order that depends only on the shape (no atomics: bitwise
// reproducible). partials: conv2d_bias_grad_partials(rows, channels) floats of device memory.
void conv2d_backward_bias_cuda(DType t, int64_t rows, int64_t channels, const void* dy, void* db,
                               float* partials, cudaStream_t stream);

}  // namespace kestrel::kernels
