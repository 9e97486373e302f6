// Max pooling of NHWC activations (YOLOv5's SPPF: nn.MaxPool2d(5, 1, 2) three times in a row).
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace kestrel::ops {

// x [N, H, W, C] -> [N, (H + 2 padding - kernel) / stride + 1, (W + ...) / stride + 1, C] with a
// square kernel x kernel window, PyTorch semantics: padding acts as -infinity and a NaN in a
// window propagates. Each output's gradient goes to its window's first maximum in row-major scan
// order (on every device alike; see kernels/maxpool.h). kernel in [1, 16], stride >= 1,
// 0 <= padding <= kernel / 2. CPU: float32/float64; CUDA: float32, float16, bfloat16.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding);

}  // namespace kestrel::ops
