// Batch norm over NHWC activations viewed as [rows = N*H*W, channels], split into the steps that
// SyncBN separates with collectives:
//   (1) local statistics -> packed moments [count, mean[C], var[C]]   (SyncBN: all-gather these)
//   (2) merge of per-rank moments with Chan's parallel formula
//   (3) apply y = (x - mean) * invstd * w + b, and the running-statistics update
//   (4) backward reduce -> sums [sum(dy)[C], sum(dy * xhat)[C]]        (SyncBN: all-reduce these)
//   (5) backward apply dx = w * invstd * (dy - sum_dy / M - xhat * sum_dy_xhat / M)
// Activations are of the storage type T; statistics, parameters and sums are of the parameter type
// P: T itself on the CPU for float and double, float for the CPU's bfloat16 activations (passed as
// raw bits) and on CUDA (T float, half or bfloat16).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

struct BatchNormShape {
  int64_t rows = 0;      // N * H * W
  int64_t channels = 0;  // C, the innermost dimension
};

// Length of a packed moments buffer: the row count, C means, C biased variances. One such buffer
// per rank is what SyncBN all-gathers, so every step below reads and writes this layout.
KESTREL_HD inline int64_t moments_size(int64_t channels) { return 2 * channels + 1; }

KESTREL_HD inline float k_sqrt(float x) { return sqrtf(x); }
KESTREL_HD inline double k_sqrt(double x) { return sqrt(x); }

// Count, mean and sum of squared deviations (M2) of one channel over some rows.
template <class A>
struct Moments {
  A count = 0, mean = 0, m2 = 0;
};

// Chan et al.'s parallel combination: exact in exact arithmetic and, unlike sum / sum-of-squares,
// free of cancellation when the mean is large against the spread.
template <class A>
KESTREL_HD inline Moments<A> merge_moments(const Moments<A>& a, const Moments<A>& b) {
  const A n = a.count + b.count;
  if (n == A(0)) return a;
  const A delta = b.mean - a.mean;
  const A wb = b.count / n;
  return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.count * wb};
}

// Moments of (x - k) from s = sum(x - k) and q = sum((x - k)^2). With k a sample of the channel
// the subtraction is (nearly) exact and q - s^2/n loses only a few bits, where the unshifted sum of
// squares loses all of them for mean 1e4, std 1. Partials sharing k merge in the shifted frame,
// where means are O(std) and keep their precision; add k to the final mean.
template <class A>
KESTREL_HD inline Moments<A> moments_from_shifted_sums(A n, A s, A q) {
  if (n == A(0)) return {};
  const A d = s / n;
  const A m2 = q - s * d;
  return {n, d, m2 > A(0) ? m2 : A(0)};
}

template <class A>
KESTREL_HD inline A batch_norm_invstd(A var, A eps) {
  return A(1) / k_sqrt(var + eps);
}

// Subtracting the mean first keeps large-mean activations exact where x * scale + shift would not.
template <class A>
KESTREL_HD inline A batch_norm_apply_fn(A x, A mean, A scale, A bias) {
  return (x - mean) * scale + bias;
}

// dx for one element: k1 = w * invstd, mean_dy = sum_dy / M, k2 = invstd * sum_dy_xhat / M, so
// that k1 * (dy - mean_dy - (x - mean) * k2) = w * invstd * (dy - sum_dy/M - xhat * sum_dy_xhat/M).
template <class A>
KESTREL_HD inline A batch_norm_dx_fn(A dy, A x, A mean, A k1, A mean_dy, A k2) {
  return k1 * (dy - mean_dy - (x - mean) * k2);
}

// PyTorch's running statistics: the variance enters unbiased (count / (count - 1)).
template <class A>
KESTREL_HD inline void batch_norm_running_fn(A count, A mean, A var, A momentum, A& running_mean,
                                             A& running_var) {
  const A unbiased = count > A(1) ? var * count / (count - A(1)) : var;
  running_mean = (A(1) - momentum) * running_mean + momentum * mean;
  running_var = (A(1) - momentum) * running_var + momentum * unbiased;
}

// --- (1) local statistics: moments = [rows, mean[C], biased var[C]] ------------------------------
void batch_norm_stats_cpu(DType t, const void* x, BatchNormShape s, void* moments);
// workspace: batch_norm_workspace_floats(s) floats for the per-block partials.
void batch_norm_stats_cuda(DType t, const void* x, BatchNormShape s, float* moments,
                           float* workspace, cudaStream_t stream);
// Scratch the CUDA statistics and backward-reduce kernels need (partials of each row block).
int64_t batch_norm_workspace_floats(BatchNormShape s);

// --- (2) merge: gathered holds `ranks` packed moments back to back, merged receives one ----------
// p is the parameter dtype (float or double); ranks with count 0 contribute nothing.
void batch_norm_merge_moments_cpu(DType p, int64_t ranks, int64_t channels, const void* gathered,
                                  void* merged);
void batch_norm_merge_moments_cuda(int64_t ranks, int64_t channels, const float* gathered,
                                   float* merged, cudaStream_t stream);

// --- (3) apply, and the running update from a packed moments buffer ------------------------------
// The running update also advances BatchNorm's num_batches_tracked by one when batches_tracked is
// given (an int64 on the update's device, as PyTorch counts in training mode); nullptr: no counter.
void batch_norm_forward_cpu(DType t, const void* x, BatchNormShape s, const void* mean,
                            const void* var, const void* weight, const void* bias, double eps,
                            void* y);
void batch_norm_forward_cuda(DType t, const void* x, BatchNormShape s, const float* mean,
                             const float* var, const float* weight, const float* bias, double eps,
                             void* y, cudaStream_t stream);
void batch_norm_update_running_cpu(DType p, int64_t channels, const void* moments,
                                   double momentum, void* running_mean, void* running_var,
                                   int64_t* batches_tracked);
void batch_norm_update_running_cuda(int64_t channels, const float* moments, double momentum,
                                    float* running_mean, float* running_var,
                                    int64_t* batches_tracked, cudaStream_t stream);

// --- (4) backward reduce: sums = [sum(dy)[C], sum(dy * xhat)[C]] ---------------------------------
void batch_norm_backward_reduce_cpu(DType t, const void* dy, const void* x, BatchNormShape s,
                                    const void* mean, const void* var, double eps, void* sums);
void batch_norm_backward_reduce_cuda(DType t, const void* dy, const void* x, BatchNormShape s,
                                     const float* mean, const float* var, double eps, float* sums,
                                     float* workspace, cudaStream_t stream);

// --- (5) backward apply --------------------------------------------------------------------------
// count points at the number of rows the statistics cover (a moments buffer's first element; the
// global count under SyncBN). sums == nullptr means the statistics were constants (eval mode):
// dx = dy * w * invstd, and count is not read.
void batch_norm_backward_apply_cpu(DType t, const void* dy, const void* x, BatchNormShape s,
                                   const void* mean, const void* var, const void* weight,
                                   double eps, const void* sums, const void* count, void* dx);
void batch_norm_backward_apply_cuda(DType t, const void* dy, const void* x, BatchNormShape s,
                                    const float* mean, const float* var, const float* weight,
                                    double eps, const float* sums, const float* count, void* dx,
                                    cudaStream_t stream);

}  // namespace kestrel::kernels
