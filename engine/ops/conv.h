// 2-D convolution (dilation 1, one group) with autograd: x NHWC [N, H, W, C], weight OHWI
// [O, KH, KW, C], optional bias [O], output NHWC [N, OH, OW, O] with
// OH = (H + 2 * pad_h - KH) / stride_h + 1 (likewise OW).
//
// CPU: float32 through oneDNN (kernels/conv2d_dnnl.h), optionally on bfloat16 operands
// (Conv2dParams::operands), bfloat16 activations (--amp bf16: x, y, dy and dx bfloat16, the float32
// weight and bias taken as they are and given float32 gradients; oneDNN's bf16 kernels, on CPUs
// with AVX-512 BF16 or AMX), float64 through the im2col + BLAS reference that the gradient checks
// use. CUDA: float32 / float16 / bfloat16 through cuDNN with
// float accumulation; the first call of a configuration times cuDNN's algorithms (a few
// milliseconds to seconds, once per process), later calls reuse the choice and allocate nothing
// beyond their outputs and the caching allocator's recycled workspace.
#pragma once
#include <string>

#include "engine/tensor.h"
#include "kernels/conv2d.h"
#include "kernels/conv2d_dnnl.h"

namespace kestrel::ops {

// What a CPU float32 convolution multiplies (classification's --amp bf16 on the CPU, --amp bf16-emulated):
// - Float32: x and w as they are.
// - Bfloat16: x, w and, in backward, dy rounded to bfloat16 and run through oneDNN's bf16 kernels,
//   accumulated in float32; y, dx, dw and db stay float32 (db from the float32 dy). Needs a CPU
//   with AVX-512 BF16 or AMX (kernels::cpu_bf16_support()); refused elsewhere.
// - Bfloat16Emulated: the same roundings, kept in float32 and run through the float32 kernels, on
//   any CPU: the same arithmetic up to the order of the float32 sums, for checking the numbers of
//   bf16 training where the instructions are missing (slower than Float32: three rounding passes).
// Inputs, gradients and autograd stay float32; the op saves the rounded x and w for backward
// (natively w stays float32: oneDNN rounds it as it reorders it into each pass's layout).
enum class ConvOperands : uint8_t { Float32, Bfloat16, Bfloat16Emulated };

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  // CUDA float32 only: let cuDNN use TF32 tensor cores (inputs rounded to a 10-bit mantissa).
  // Off by default so that float32 results match the CPU reference to float32 accuracy.
  bool allow_tf32 = false;
  // CUDA only: deterministic cuDNN algorithms only (bitwise the same result every run), chosen by
  // cuDNN's heuristics and never by timing, so every run picks the same ones; a configuration
  // with no deterministic algorithm is an error naming its shape. Off: the fastest algorithm a
  // timed search finds, deterministic ones preferred (kernels/conv_algo_cache.h).
  bool deterministic = false;
  // CPU float32 only (above).
  ConvOperands operands = ConvOperands::Float32;
};

// bias may be undefined. Gradients flow to each of x, weight, bias that requires grad.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// Inference: act(conv2d(x, weight, bias)) without autograd (refused while gradients are on and an
// operand requires them). On the CPU in float32 the activation runs inside oneDNN's convolution
// (a post-op: no second pass over the output; SiLU within a few ulp of ops::silu, not bit-equal);
// elsewhere it is conv2d followed by ops::silu. weight_version is the promise of
// kernels/conv2d_dnnl.h: a caller whose weights stay unchanged between calls (a fused model)
// passes one version, from kernels::conv2d_dnnl_new_weight_version(), every time, and the filter is
// reordered once; kUncachedWeights reorders it on every call. On the CPU with x in bfloat16 (the
// bfloat16 inference of val/detect --half on a CPU with AVX-512 BF16 or AMX), weight and bias stay
// float32 (rounded by the filter's cached reorder), the sums float32, y bfloat16, the activation
// applied before y is rounded.
enum class ConvActivation { None, Silu };
Tensor conv2d_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& p, ConvActivation act,
                        kernels::WeightVersion weight_version = kernels::kUncachedWeights);

// The three backward passes on their own, without autograd (conv2d's backward uses them; so do
// the benchmarks, to time each pass alone).
// dx for an input of x_shape, from dy [N, OH, OW, O] and weight.
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& weight, const Shape& x_shape,
                            const Conv2dParams& p);
// dweight of weight_shape, from x and dy.
Tensor conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Shape& weight_shape,
                              const Conv2dParams& p);
// dbias [O]: dy summed over N, OH, OW.
Tensor conv2d_backward_bias(const Tensor& dy);

// The algorithm `pass` of this configuration runs with: on CUDA the cuDNN algorithm and math type
// chosen by the first call, e.g. "implicit_precomp_gemm/tensor_op" (empty before that call);
// on the CPU oneDNN's implementation for float32, e.g. "brgconv:avx512_core", and "im2col_gemm"
// for float64.
std::string conv2d_algorithm(kernels::ConvPass pass, const Tensor& x, const Tensor& weight,
                             const Conv2dParams& p);

}  // namespace kestrel::ops
