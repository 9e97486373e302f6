// Gradient compression for the data-parallel all-reduce, as PyTorch DDP's fp16_compress_hook and
// bf16_compress_hook: each rank sends its fp32 gradient bucket in a 16-bit type, the ranks sum the
// 16-bit values, and the sum is widened back into the fp32 gradient.
//   compress:   h[i] = half( half(g[i]) / world )   the hook's buffer.to(half).div_(world): cast
//                                                    first, then divide, computed in float and
//                                                    rounded to the 16-bit type again
//   all-reduce: Sum of h over the ranks (in the 16-bit type; each partial sum rounded to it)
//   decompress: g[i] = float(h[i])                  exact
// So a gradient the 16-bit type cannot hold is lost before the division: fp16's largest finite
// value is 65504 and anything from 65520 up in magnitude becomes inf (the step then sees an inf
// gradient, which an fp16 loss scaler skips and backs off from); bf16 keeps fp32's range with 8
// significant bits. Values and world sizes whose quotients are representable pass exactly.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"
#include "kernels/rounding.h"

namespace kestrel::kernels {

// --- per-value math (shared by the CPU reference and the CUDA kernels) ---------------------------
template <class H>
KESTREL_HD inline H compress_grad(float g, float world) {
  return from_acc<H>(div_rn(to_acc<H>(from_acc<H>(g)), world));
}

template <class H>
KESTREL_HD inline float decompress_grad(H h) {
  return to_acc<H>(h);
}

// half: DType::F16 or DType::BF16; src and dst hold n contiguous elements; world >= 1.
void grad_compress_cpu(const float* src, void* dst, DType half, int64_t n, int world);
void grad_decompress_cpu(const void* src, DType half, float* dst, int64_t n);
void grad_compress_cuda(const float* src, void* dst, DType half, int64_t n, int world,
                        cudaStream_t stream);
void grad_decompress_cuda(const void* src, DType half, float* dst, int64_t n, cudaStream_t stream);

}  // namespace kestrel::kernels
