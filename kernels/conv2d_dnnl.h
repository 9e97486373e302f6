// float32 convolutions on the CPU through oneDNN (and bfloat16-operand ones, below): the fast CPU
// path for training and inference.
// Same geometry and buffers as the reference in kernels/conv2d.h (NHWC activations, OHWI filters,
// contiguous), which stays the float64 reference the tests check against.
//
// oneDNN JIT-compiles its kernels for the CPU it finds (AVX-512 included), so one binary serves
// every x86 machine. Activations and their gradients are handed over as NHWC without copies. The
// filter goes through the blocked format oneDNN's kernels prefer (plain OHWI would send every
// configuration to its reference implementation, hundreds of times slower). The reordered copy is
// cached, keyed by (filter pointer, configuration, WeightVersion): calls that promise unchanged
// contents through the same version share one reorder, and a new version rewrites the cached copy
// in place (no allocation). Forward and backward-data want different layouts, so each keeps its
// own copy. Primitives are built once per configuration and cached for the life of the process;
// their scratch memory is leased per call from a pool (user scratchpad mode).
//
// Versions: oneDNN 3.2 (scripts/install-onednn.sh, PyPI) where installed, else Debian's 2.6; the
// two differ only in how primitive descriptors are built (conv2d_dnnl.cpp has both). On AVX2, 3.2
// runs the strided 3x3 convolutions through its brgconv kernels, 2-3x faster than 2.6's.
//
// Threads: oneDNN runs on OpenMP (GNU libgomp), sized by OMP_NUM_THREADS like any OpenMP program.
// OpenBLAS is used only by the float64 reference (kernels/conv2d_cpu.cpp), so its thread pool never
// wakes during a float32 step and the two runtimes do not compete for the cores. libgomp's workers
// spin after each parallel region (read from the environment when the library loads): on a
// machine whose cores are busy with other work, OMP_WAIT_POLICY=passive was 2.4x faster per
// training step (yolov5n 320 b16, 2 threads); Kestrel's programs start with a shorter spin
// (base/openmp_wait.h).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/conv2d.h"

namespace kestrel::kernels {

// What the caller promises about a filter buffer's contents: two calls with the same pointer and
// the same non-zero version read the same values, so the reordered filter of the first call may
// serve the second. A caller that cannot promise that passes kUncachedWeights (reorder every call,
// cache nothing). conv2d_dnnl_new_weight_version() hands out versions never used before, so a
// caller that takes a fresh one whenever the filter may have changed can never read stale values.
using WeightVersion = uint64_t;
constexpr WeightVersion kUncachedWeights = 0;
WeightVersion conv2d_dnnl_new_weight_version();

// An activation applied inside the forward convolution (a oneDNN post-op, in registers as each
// output block is written) instead of in a second pass over y. Silu is oneDNN's swish: its own exp,
// so within a few ulp of kernels' exp_approx SiLU, not equal to it bit for bit. Inference only:
// training keeps the pre-activation for backward and runs BN + SiLU as their own op.
enum class ConvActivation : uint8_t { None, Silu };

// y = act(conv(x, w) + bias); bias may be null.
void conv2d_forward_dnnl(const Conv2dShape& s, const float* x, const float* w, WeightVersion wv,
                         const float* bias, float* y, ConvActivation act = ConvActivation::None);
// dx = the transposed convolution of dy with w.
void conv2d_backward_data_dnnl(const Conv2dShape& s, const float* dy, const float* w,
                               WeightVersion wv, float* dx);
// dw (OHWI) = sum over images of dy^T . im2col(x); db[o] = sum of dy[..., o] when db is not null
// (oneDNN computes it in the same pass over dy).
void conv2d_backward_filter_dnnl(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 float* db);

// The same passes on bfloat16 operands (x and dy as raw bfloat16 bits; w float32 OHWI, rounded to
// bfloat16 by the reorder into the pass's layout) with float32 accumulation and float32 results
// (y, dx, dw; the bias is float32): the CPU's mixed precision. oneDNN offers them on CPUs with
// AVX-512 BF16 or AMX (kernels/bf16_operands.h: cpu_bf16_support()); elsewhere building the
// primitive fails with a kestrel::Error. The filter is reordered on every call (training weights
// change every step).
void conv2d_forward_dnnl_bf16(const Conv2dShape& s, const uint16_t* x, const float* w,
                              const float* bias, float* y);
// bfloat16 activations (inference, and training's forward): x and y bfloat16 bits, w the float32
// OHWI filter (its reorder, rounding it to bfloat16, cached by version as conv2d_forward_dnnl's),
// the bias float32, float32 accumulation, the activation applied before y is rounded.
void conv2d_forward_dnnl_bf16_io(const Conv2dShape& s, const uint16_t* x, const float* w, WeightVersion wv,
                                 const float* bias, uint16_t* y, ConvActivation act = ConvActivation::None);
void conv2d_backward_data_dnnl_bf16(const Conv2dShape& s, const uint16_t* dy, const float* w,
                                    float* dx);
// Training on bfloat16 activations: dy and dx bfloat16 bits, w the float32 OHWI filter (its reorder
// cached by version), float32 accumulation, dx rounded once. (The forward is
// conv2d_forward_dnnl_bf16_io, backward-weights conv2d_backward_filter_dnnl_bf16.)
void conv2d_backward_data_dnnl_bf16_io(const Conv2dShape& s, const uint16_t* dy, const float* w, WeightVersion wv,
                                       uint16_t* dx);
void conv2d_backward_filter_dnnl_bf16(const Conv2dShape& s, const uint16_t* x, const uint16_t* dy,
                                      float* dw);
std::string conv2d_dnnl_implementation_bf16(ConvPass pass, const Conv2dShape& s);

// The oneDNN implementation a pass of this configuration runs, e.g. "brgconv:avx512_core", or,
// for backward-weights where oneDNN would take one of its older jit kernels (conv2d_dnnl.cpp):
// "im2col+sgemm" for 3x3 convolutions (the stride-2 ones, and stride 1 from 64 input channels;
// im2col in groups of images and oneDNN's sgemm, 1.5-3.3x faster on AVX2), "sgemm" for 1x1 ones at
// stride 1 without padding (one GEMM over all images, no im2col).
std::string conv2d_dnnl_implementation(ConvPass pass, const Conv2dShape& s);

// Counters of the filter cache (process-wide), for tests and benchmarks: reorders done, and
// calls served by an already reordered filter.
struct DnnlWeightCacheStats {
  uint64_t reorders = 0, hits = 0;
};
DnnlWeightCacheStats conv2d_dnnl_weight_cache_stats();

}  // namespace kestrel::kernels
