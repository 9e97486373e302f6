// Nearest-neighbour 2x upsampling of NHWC tensors (YOLOv5's nn.Upsample(None, 2, 'nearest')):
// output pixel (2h + a, 2w + b) is a copy of input pixel (h, w) for a, b in {0, 1}.
//
// Both directions run one thread per input pixel (and channel group): forward reads it once and
// writes its 2x2 block; backward gathers the block's four gradients and sums them in a fixed
// order, so there are no atomics and CPU and CUDA add the same numbers in the same order.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

// The input's NHWC sizes; the output is [n, 2h, 2w, c].
struct Upsample2xShape {
  int64_t n = 0, h = 0, w = 0, c = 0;
};

// Input pixel p (flat over n, h, w) feeds output pixels t, t + 1, t + 2w and t + 2w + 1 (flat
// over n, 2h, 2w), t returned here. The image index needs no separate handling: stacking the
// images' rows, input row r = p / w becomes output rows 2r and 2r + 1.
template <class I>
KESTREL_HD inline I upsample2x_first_target(I p, I w) {
  const I row = p / w;
  return 4 * w * row + 2 * (p - row * w);
}

// The gradient of one input element from its 2x2 block of output gradients.
template <class A>
KESTREL_HD inline A upsample2x_block_sum(A top_left, A top_right, A bottom_left, A bottom_right) {
  return (top_left + top_right) + (bottom_left + bottom_right);
}

// x [n, h, w, c] -> y [n, 2h, 2w, c]. Pure data movement: any element size (1, 2, 4, 8 bytes).
void upsample2x_forward_cpu(size_t elem_size, const void* x, void* y, const Upsample2xShape& s);
void upsample2x_forward_cuda(size_t elem_size, const void* x, void* y, const Upsample2xShape& s,
                             cudaStream_t stream);

// dx [n, h, w, c] from dy [n, 2h, 2w, c]. CPU: float, double and bfloat16; CUDA: float, half and
// bfloat16; the 16-bit types summed in float and rounded once.
void upsample2x_backward_cpu(DType t, const void* dy, void* dx, const Upsample2xShape& s);
void upsample2x_backward_cuda(DType t, const void* dy, void* dx, const Upsample2xShape& s,
                              cudaStream_t stream);

}  // namespace kestrel::kernels
