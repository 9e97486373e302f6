// Softmax cross-entropy with label smoothing over rows of logits (the classifier's loss, the
// reference's nn.CrossEntropyLoss(label_smoothing=eps)), CPU reference and CUDA.
//
// logits [rows, classes] contiguous, labels int64 [rows]. Per row r with label y and
// lse = log(sum_c exp(x_c)) (computed stably as max + log(sum exp(x_c - max))):
//   loss_r = (1 - eps) * (lse - x_y) + (eps / classes) * sum_c (lse - x_c)
//          = (1 - eps) * (lse - x_y) + eps * (lse - mean_c x_c)
//   dloss_r / dx_c = softmax_c - target_c,  target_c = (1 - eps) * [c == y] + eps / classes.
// The forward writes loss_r and lse_r (kept for the backward); the backward writes
// dlogits[r, c] = (exp(x_c - lse_r) - target_c) * gout[r] for a per-row incoming gradient gout.
//
// Types: the CPU takes float and double logits and accumulates in double, writing loss, lse in the
// logits' type; CUDA takes float, half and bfloat16 logits, computes in float and writes loss and
// lse as float. gout is of the loss type; dlogits of the logits' type.
//
// Labels outside [0, classes): the CPU entry points refuse them (kestrel::Error naming the row);
// the CUDA kernels cannot throw, so such a row's loss, lse and gradients come out NaN (a
// non-finite loss the training step's check catches). Callers with host labels check them before
// they upload (ops::check_class_labels). Deterministic: every output is one thread's fixed-order
// loop (CUDA: one thread per row in the forward, one per element in the backward).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

struct CrossEntropyShape {
  int64_t rows = 0;
  int64_t classes = 0;
};

// --- per-row math (shared by the CPU reference and the CUDA kernels) ---------------------------
KESTREL_HD inline float ce_exp(float x) { return expf(x); }
KESTREL_HD inline double ce_exp(double x) { return exp(x); }
KESTREL_HD inline float ce_log(float x) { return logf(x); }
KESTREL_HD inline double ce_log(double x) { return log(x); }

KESTREL_HD inline bool ce_label_ok(int64_t label, int64_t classes) {
  return label >= 0 && label < classes;
}

// A row's log-sum-exp and plain sum of its logits, accumulated in A.
template <class A>
struct CeRowStats {
  A lse;
  A sum;
};

// Two passes over the row: its maximum, then sum exp(x - max) and sum x. classes >= 1.
template <class A, class T>
KESTREL_HD inline CeRowStats<A> ce_row_stats(const T* x, int64_t classes) {
  A m = static_cast<A>(to_acc(x[0]));
  for (int64_t c = 1; c < classes; ++c) {
    const A v = static_cast<A>(to_acc(x[c]));
    m = v > m ? v : m;
  }
  A sum_exp = A(0), sum = A(0);
  for (int64_t c = 0; c < classes; ++c) {
    const A v = static_cast<A>(to_acc(x[c]));
    sum_exp += ce_exp(v - m);
    sum += v;
  }
  return {m + ce_log(sum_exp), sum};
}

// loss_r from the row's statistics and its label's logit x_y.
template <class A>
KESTREL_HD inline A ce_row_loss(const CeRowStats<A>& s, A x_label, int64_t classes, A eps) {
  const A nll = s.lse - x_label;
  if (eps == A(0)) return nll;
  return (A(1) - eps) * nll + eps * (s.lse - s.sum / static_cast<A>(classes));
}

// The smoothed one-hot target of class c in a row labelled `label`.
template <class A>
KESTREL_HD inline A ce_target(int64_t c, int64_t label, int64_t classes, A eps) {
  const A uniform = eps / static_cast<A>(classes);
  return c == label ? (A(1) - eps) + uniform : uniform;
}

// d loss_r / d x_c times the row's incoming gradient.
template <class A>
KESTREL_HD inline A ce_grad(A x, A lse, A target, A gout) {
  return (ce_exp(x - lse) - target) * gout;
}

// --- entry points ------------------------------------------------------------------------------
// The row whose label lies outside [0, classes), the first one; -1 when every label fits.
int64_t first_bad_label(const int64_t* labels, int64_t rows, int64_t classes);

// loss[r] and lse[r] as above. CPU: t float or double; refuses bad labels.
void cross_entropy_forward_cpu(DType t, const void* logits, const int64_t* labels, void* loss,
                               void* lse, const CrossEntropyShape& shape, double label_smoothing);
void cross_entropy_forward_cuda(DType t, const void* logits, const int64_t* labels, float* loss,
                                float* lse, const CrossEntropyShape& shape, double label_smoothing,
                                cudaStream_t stream);

// dlogits[r, c] = (softmax - target) * gout[r], from the forward's lse.
void cross_entropy_backward_cpu(DType t, const void* logits, const int64_t* labels, const void* lse,
                                const void* gout, void* dlogits, const CrossEntropyShape& shape,
                                double label_smoothing);
void cross_entropy_backward_cuda(DType t, const void* logits, const int64_t* labels,
                                 const float* lse, const float* gout, void* dlogits,
                                 const CrossEntropyShape& shape, double label_smoothing,
                                 cudaStream_t stream);

}  // namespace kestrel::kernels
