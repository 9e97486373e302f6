// Batch norm followed by SiLU, the pair that ends each of YOLOv5's 57 Conv blocks, fused into
// single passes over memory on the CPU:
//   forward:  y = silu(z), z = (x - mean) * invstd * w + b, without storing z;
//   backward: g = dy * silu'(z) (z recomputed from x) written once, with BN's backward sums
//             [sum(g)[C], sum(g * xhat)[C]] accumulated in the same pass; dx then comes from
//             batch_norm_backward_apply_cpu on g (in place: dx may be g's buffer).
// Unfused, the pair reads and writes z twice forward and once more backward, and keeps z alive
// for the backward pass. The float32 path computes z as one float multiply-add, z = x a + b with
// per-channel a = w invstd and b = bias - mean a rounded from double once (PyTorch's CPU batch
// norm does the same), and SiLU with exp_approx; BN's statistics and backward sums stay in double
// as in the separate kernels, so fused and unfused agree to a few float32 roundings (the tests:
// 2e-5). float64 runs plain loops (the gradient checks' reference). CUDA composes the separate
// kernels (engine/ops/batchnorm_silu.cpp); cuDNN's runtime fusion is the equivalent there.
// Measured: z in double cost 20-28 % of the fused op's time in a YOLOv5n 320 b16 step
// (`train_step --profile`, BatchNormSilu 174 -> 125-140 ms a step, 2026-11-28).
#pragma once
#include "kernels/batchnorm.h"

namespace kestrel::kernels {

// t: float32 or float64 (x, y and the per-channel buffers all of t), or bfloat16 (x and y as raw
// bfloat16 bits, the per-channel buffers float32; y rounded once).
void batch_norm_silu_forward_cpu(DType t, const void* x, BatchNormShape s, const void* mean,
                                 const void* var, const void* weight, const void* bias,
                                 double eps, void* y);

// g receives dy * silu'(z); sums receives [sum(g)[C], sum(g * xhat)[C]] as
// batch_norm_backward_reduce_cpu would for g.
void batch_norm_silu_backward_reduce_cpu(DType t, const void* dy, const void* x, BatchNormShape s,
                                         const void* mean, const void* var, const void* weight,
                                         const void* bias, double eps, void* g, void* sums);

// The whole backward on bfloat16 activations (dy, x, dx raw bits; statistics, parameters and sums
// float32): sums as above, and dx (when not null) in a second pass that recomputes g from dy and x
// rather than storing it (g in float32 would double the traffic of bfloat16 activations), then BN's
// input gradient as batch_norm_backward_apply_cpu forms it, rounded once. count: the rows the batch
// statistics cover; null for eval-mode statistics (constants for the gradient).
void batch_norm_silu_backward_cpu_bf16(const uint16_t* dy, const uint16_t* x, BatchNormShape s, const float* mean,
                                       const float* var, const float* weight, const float* bias, double eps,
                                       const float* count, float* sums, uint16_t* dx);

}  // namespace kestrel::kernels
