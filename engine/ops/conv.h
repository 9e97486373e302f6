// 2-D convolution (dilation 1, one group) with autograd: x NHWC [N, H, W, C], weight OHWI
// [O, KH, KW, C], optional bias [O], output NHWC [N, OH, OW, O] with
// OH = (H + 2 * pad_h - KH) / stride_h + 1 (likewise OW).
//
// CPU: float32 through oneDNN (kernels/conv2d_dnnl.h), float64 through the im2col + BLAS
// reference that the gradient checks use. CUDA: float32 / float16 / bfloat16 through cuDNN with
// float accumulation; the first call of a configuration times cuDNN's algorithms (a few
// milliseconds to seconds, once per process), later calls reuse the choice and allocate nothing
// beyond their outputs and the caching allocator's recycled workspace.
#pragma once
#include <string>

#include "engine/tensor.h"
#include "kernels/conv2d.h"
#include "kernels/conv2d_dnnl.h"

namespace kestrel::ops {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  // CUDA float32 only: let cuDNN use TF32 tensor cores (inputs rounded to a 10-bit mantissa).
  // Off by default so that float32 results match the CPU reference to float32 accuracy.
  bool allow_tf32 = false;
};

// bias may be undefined. Gradients flow to each of x, weight, bias that requires grad.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// Inference: act(conv2d(x, weight, bias)) without autograd (refused while gradients are on and an
// operand requires them). On the CPU in float32 the activation runs inside oneDNN's convolution
// (a post-op: no second pass over the output; SiLU within a few ulp of ops::silu, not bit-equal);
// elsewhere it is conv2d followed by ops::silu. weight_version is the promise of
// kernels/conv2d_dnnl.h: a caller whose weights stay unchanged between calls (a fused model)
// passes one version, from kernels::conv2d_dnnl_new_weight_version(), every time, and the filter is
// reordered once; kUncachedWeights reorders it on every call.
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
