// Fused multi-tensor arithmetic of the training step: SGD (Nesterov momentum, weight decay), Adam,
// AdamW and RMSProp updates, the global gradient norm (deterministic two-pass), scaling by a
// factor with an inf/nan check (loss-scale unscaling, clipping), the EMA update of weights and
// zeroing gradients.
//
// A TensorList describes many tensors by raw pointers: tensor i has numel[i] elements in `depth`
// contiguous buffers of one dtype (e.g. param, grad, momentum), and optionally a step count. One
// CUDA launch covers many tensors: the list is cut into launches of at most kMaxListTensors
// tensors and kMaxListBlocks blocks, the pointers travelling in the kernel's arguments (no
// device-side pointer array to allocate or copy).
//
// The optimizer and EMA updates read every value that changes from one step to the next when
// they run, from memory the caller owns (device memory on CUDA): the group's lr and momentum /
// beta1 (GroupHyper), Adam's and RMSProp's per-tensor step counts, the EMA's update count and the
// skip flag, and advance the counts themselves unless the step is skipped. So their launches'
// arguments are the same from step to step and a CUDA graph captured once replays them. What
// stays fixed for a run (weight decay, Nesterov, Adam's beta2 and eps, RMSProp's alpha and eps,
// the EMA's decay and tau) is a kernel argument: change it and a captured graph must be captured
// again. (The scaling kernels still take their factor as an argument.)
//
// The per-element math below rounds after every operation (no fused multiply-add), in the order
// PyTorch's optimizers use, so the CPU reference and the CUDA kernels agree bit for bit in float.
// The per-step coefficients (Adam's bias corrections, the EMA's decay) are computed in double by
// the same KESTREL_HD functions on both sides, as PyTorch computes them in Python floats, then
// rounded to the storage's math type; on CUDA once per block (into shared memory).
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "base/dtype.h"
#include "kernels/rounding.h"

namespace kestrel::kernels {

constexpr int kMaxListDepth = 4;
constexpr int kMaxListTensors = 36;
constexpr int kMaxListBlocks = 320;
constexpr int64_t kListChunk = 65536;  // elements per CUDA block (and per norm partial sum)

struct TensorList {
  int depth = 0;
  std::vector<std::array<void*, kMaxListDepth>> ptrs;
  std::vector<int64_t> numel;
  std::vector<int64_t*> counts;  // per tensor: its step count (Adam) or null

  explicit TensorList(int depth_) : depth(depth_) {}
  // Adds one tensor: `depth` buffers of n elements each, and where the kernel keeps one (Adam),
  // the tensor's step count (memory of the buffers' device; one count per tensor, not shared).
  void add(std::initializer_list<void*> buffers, int64_t n, int64_t* count = nullptr);
  size_t size() const { return numel.size(); }
};

// How the CUDA kernels cut a list into launches (host code, tested on the CPU). A launch names at
// most kMaxListTensors tensors of the list and kMaxListBlocks blocks; block b covers chunk
// block_chunk[b] (kListChunk elements) of the launch's tensor block_tensor[b]. Chunks come in
// list order, each exactly once; a tensor whose chunks straddle two launches appears in both.
// Empty tensors take no block.
struct ListLaunch {
  std::vector<int> tensors;       // indices into the TensorList
  std::vector<int> block_tensor;  // indices into `tensors`
  std::vector<int32_t> block_chunk;
  int64_t first_block = 0;        // blocks of the earlier launches (the norm's partial index)
};
std::vector<ListLaunch> plan_list_launches(const TensorList& list);

// --- per-element math (shared by the CPU reference and the CUDA kernels; kernels/rounding.h) --
// Math functions of double that the host and device code both call (the device's own versions:
// within an ulp or two of the host's in double, the same after the rounding to float but in rare
// ties).
KESTREL_HD inline double pow_d(double base, double exponent) {
#if defined(__CUDA_ARCH__)
  return ::pow(base, exponent);
#else
  return std::pow(base, exponent);
#endif
}
KESTREL_HD inline double exp_d(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}

// One parameter group's values that change between steps (the schedule's warmup and decay). The
// Optimizer keeps one per group in a float64 tensor on the parameters' device; the kernels read
// it when they run (host memory on the CPU, device memory on CUDA).
struct GroupHyper {
  double lr;
  double momentum;  // SGD's and RMSProp's momentum; Adam's beta1
};
static_assert(sizeof(GroupHyper) == 2 * sizeof(double), "GroupHyper is two packed doubles");

// SGD as PyTorch's (dampening 0): d = g + wd·p; buf = momentum·buf + d; Nesterov: d += momentum·buf,
// else d = buf; p -= lr·d. A zero buffer gives PyTorch's first step (buf = d) exactly.
struct SgdConfig {  // fixed for a run: kernel arguments
  double weight_decay;
  bool nesterov;
};
template <class T>
struct SgdCoef {
  T lr, momentum, weight_decay;
  bool nesterov;
};
template <class T>
KESTREL_HD inline SgdCoef<T> sgd_coef(const GroupHyper& h, const SgdConfig& c) {
  return {T(h.lr), T(h.momentum), T(c.weight_decay), c.nesterov};
}
template <class T>
KESTREL_HD inline void sgd_update(T& p, T& buf, T g, const SgdCoef<T>& c) {
  T d = c.weight_decay != T(0) ? add_rn(g, mul_rn(c.weight_decay, p)) : g;
  buf = add_rn(mul_rn(buf, c.momentum), d);
  d = c.nesterov ? add_rn(d, mul_rn(c.momentum, buf)) : buf;
  p = add_rn(p, mul_rn(-c.lr, d));
}

// Adam / AdamW as PyTorch's (amsgrad off). Per tensor and step t = count + 1, in double as PyTorch
// computes them in Python floats: step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t),
// decay_factor = 1 - lr·wd (AdamW); then rounded field by field to the math type. Adam adds wd·p
// to the gradient.
struct AdamConfig {  // fixed for a run: kernel arguments
  double beta2, eps, weight_decay;
  bool decoupled;  // AdamW
};
template <class T>
struct AdamCoef {
  T one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  T step_size, bc2_sqrt, decay_factor;
  bool decoupled;
};
// step: the step being taken, >= 1.
KESTREL_HD inline AdamCoef<double> adam_coef(const GroupHyper& h, const AdamConfig& c,
                                             int64_t step) {
  const double t = static_cast<double>(step);
  const double bc1 = add_rn(1.0, -pow_d(h.momentum, t));
  const double bc2 = add_rn(1.0, -pow_d(c.beta2, t));
  return {add_rn(1.0, -h.momentum),
          c.beta2,
          add_rn(1.0, -c.beta2),
          c.eps,
          c.weight_decay,
          div_rn(h.lr, bc1),
          sqrt_rn(bc2),
          add_rn(1.0, -mul_rn(h.lr, c.weight_decay)),
          c.decoupled};
}
template <class T>
KESTREL_HD inline AdamCoef<T> cast_coef(const AdamCoef<double>& c) {
  return {T(c.one_minus_beta1), T(c.beta2), T(c.one_minus_beta2), T(c.eps), T(c.weight_decay),
          T(c.step_size), T(c.bc2_sqrt), T(c.decay_factor), c.decoupled};
}
template <class T>
KESTREL_HD inline void adam_update(T& p, T& m, T& v, T g, const AdamCoef<T>& c) {
  if (c.decoupled)
    p = mul_rn(p, c.decay_factor);
  else if (c.weight_decay != T(0))
    g = add_rn(g, mul_rn(c.weight_decay, p));
  m = add_rn(m, mul_rn(c.one_minus_beta1, add_rn(g, -m)));  // lerp(m, g, 1 - b1), weight < 0.5
  v = add_rn(mul_rn(v, c.beta2), mul_rn(c.one_minus_beta2, mul_rn(g, g)));
  const T denom = add_rn(div_rn(sqrt_rn(v), c.bc2_sqrt), c.eps);
  p = add_rn(p, mul_rn(-c.step_size, div_rn(m, denom)));
}

// RMSprop as PyTorch's (centered off, the reference's classifier optimizer 'RMSProp'):
// g += wd·p; sq = alpha·sq + (1 - alpha)·g²; avg = sqrt(sq) + eps; with momentum > 0
// buf = momentum·buf + g / avg and p -= lr·buf, else p -= lr·g / avg. 1 - alpha is computed in
// double (as PyTorch's Python float) and rounded to the math type. PyTorch's step count, which the
// update does not read, is kept per tensor and advanced like Adam's.
struct RmspropConfig {  // fixed for a run: kernel arguments
  double alpha, eps, weight_decay;
};
template <class T>
struct RmspropCoef {
  T lr, momentum, alpha, one_minus_alpha, eps, weight_decay;
};
template <class T>
KESTREL_HD inline RmspropCoef<T> rmsprop_coef(const GroupHyper& h, const RmspropConfig& c) {
  return {T(h.lr),  T(h.momentum), T(c.alpha), T(add_rn(1.0, -c.alpha)),
          T(c.eps), T(c.weight_decay)};
}
template <class T>
KESTREL_HD inline void rmsprop_update(T& p, T& sq, T& buf, T g, const RmspropCoef<T>& c) {
  if (c.weight_decay != T(0)) g = add_rn(g, mul_rn(c.weight_decay, p));
  sq = add_rn(mul_rn(sq, c.alpha), mul_rn(c.one_minus_alpha, mul_rn(g, g)));
  const T avg = add_rn(sqrt_rn(sq), c.eps);
  if (c.momentum > T(0)) {
    buf = add_rn(mul_rn(buf, c.momentum), div_rn(g, avg));
    p = add_rn(p, mul_rn(-c.lr, buf));
  } else {
    p = add_rn(p, mul_rn(-c.lr, div_rn(g, avg)));
  }
}

// clip_grad_norm_'s factor: max_norm / (norm + 1e-6), clamped to at most 1 (NaN stays NaN).
template <class T>
KESTREL_HD inline T clip_coef(T norm, T max_norm) {
  const T c = div_rn(max_norm, add_rn(norm, T(1e-6)));
  return c > T(1) ? T(1) : c;
}

// The reference ModelEMA's decay ramp: d = decay·(1 - exp(-updates / tau)) at the `updates`-th
// update (>= 1), in double; the update uses d and 1 - d rounded to the math type.
struct EmaRamp {  // fixed for a run: kernel arguments
  double decay, tau;
};
KESTREL_HD inline double ema_decay(const EmaRamp& r, int64_t updates) {
  return mul_rn(r.decay, add_rn(1.0, -exp_d(div_rn(-static_cast<double>(updates), r.tau))));
}
template <class T>
struct EmaCoef {
  T d, one_minus_d;
};
template <class T>
KESTREL_HD inline EmaCoef<T> ema_coef(const EmaRamp& r, int64_t updates) {
  const double d = ema_decay(r, updates);
  return {T(d), T(add_rn(1.0, -d))};
}
// ema = d·ema + (1 - d)·model, two products and a sum, as ModelEMA's in-place ops.
template <class T>
KESTREL_HD inline T ema_value(T ema, T model, T d, T one_minus_d) {
  return add_rn(mul_rn(ema, d), mul_rn(one_minus_d, model));
}

// A step guarded by a flag the device computed (a non-finite loss on some rank): the update is
// skipped when the flag is non-zero. Read by the kernel itself, so the host never waits for it.
KESTREL_HD inline bool step_skipped(const float* skip) { return skip != nullptr && *skip != 0.0f; }

// --- entry points ------------------------------------------------------------------------------
// CPU: float and double. CUDA: float, half and bfloat16 storage, float math. Every buffer of a
// list has the list's dtype. Pointers to per-step values (hyper, counts, skip) are host memory on
// the CPU and device memory on CUDA, and are read when the kernels run. `skip` (optional): when
// it points at a non-zero value the call changes nothing, counts included (see step_skipped).

// list: (param, grad, momentum buffer); hyper: the group's lr and momentum.
void sgd_step_cpu(DType t, const TensorList& list, const GroupHyper* hyper, const SgdConfig& c,
                  const float* skip = nullptr);
void sgd_step_cuda(DType t, const TensorList& list, const GroupHyper* hyper, const SgdConfig& c,
                   cudaStream_t s, const float* skip = nullptr);

// list: (param, grad, exp_avg, exp_avg_sq), every tensor with its step count c (>= 0, the steps
// taken so far): the update uses t = c + 1, then c advances by one (not when skipped). hyper:
// the group's lr and beta1. On CUDA the counts advance in a second small launch, after every
// block has read them.
void adam_step_cpu(DType t, const TensorList& list, const GroupHyper* hyper, const AdamConfig& c,
                   const float* skip = nullptr);
void adam_step_cuda(DType t, const TensorList& list, const GroupHyper* hyper, const AdamConfig& c,
                    cudaStream_t s, const float* skip = nullptr);

// list: (param, grad, square_avg, momentum_buffer), every tensor with its step count (>= 0),
// which advances by one (not when skipped; on CUDA in a second small launch). hyper: the group's
// lr and momentum (momentum 0: the buffer is left alone, as PyTorch keeps none).
void rmsprop_step_cpu(DType t, const TensorList& list, const GroupHyper* hyper,
                      const RmspropConfig& c, const float* skip = nullptr);
void rmsprop_step_cuda(DType t, const TensorList& list, const GroupHyper* hyper,
                       const RmspropConfig& c, cudaStream_t s, const float* skip = nullptr);

// Euclidean norm of all elements of all tensors of a depth-1 list, summed in double.
double global_norm_cpu(DType t, const TensorList& list);
// CUDA: pass 1 writes one double partial sum per kListChunk elements of each tensor into
// `workspace` (norm_partial_count(list) doubles), pass 2 sums them in a fixed order and writes
// float(sqrt(sum)) to *norm (device memory). Same result on every run.
int64_t norm_partial_count(const TensorList& list);
void global_norm_cuda(DType t, const TensorList& list, double* workspace, float* norm,
                      cudaStream_t s);

// x *= factor over a depth-1 list. Returns (CPU) / flags (CUDA: *found_nonfinite = 1, device
// memory, may be null) whether any input value was inf or NaN.
bool scale_cpu(DType t, const TensorList& list, double factor);
void scale_cuda(DType t, const TensorList& list, double factor, float* found_nonfinite,
                cudaStream_t s);
// x *= clip_coef(*norm, max_norm) with the norm read on the device (no host synchronisation).
void clip_scale_cuda(DType t, const TensorList& list, const float* norm, double max_norm,
                     cudaStream_t s);

// list: (ema, model). *updates: the EMA's update count n; ema = d·ema + (1 - d)·model with
// d = ema_decay(ramp, n + 1), then n advances by one (not when skipped; also for an empty list).
void ema_update_cpu(DType t, const TensorList& list, const EmaRamp& ramp, int64_t* updates,
                    const float* skip = nullptr);
void ema_update_cuda(DType t, const TensorList& list, const EmaRamp& ramp, int64_t* updates,
                     cudaStream_t s, const float* skip = nullptr);

// Every element of a depth-1 list set to zero bits (+0.0), any dtype: gradients zeroed in place.
// CUDA: one launch per launch plan entry, not one memset per tensor.
void zero_cpu(DType t, const TensorList& list);
void zero_cuda(DType t, const TensorList& list, cudaStream_t s);

}  // namespace kestrel::kernels
