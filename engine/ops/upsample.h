// Nearest-neighbour 2x upsampling of NHWC activations (YOLOv5's nn.Upsample(None, 2, 'nearest')).
#pragma once
#include "engine/tensor.h"

namespace kestrel::ops {

// x [N, H, W, C] -> [N, 2H, 2W, C]; each input pixel fills a 2x2 block. Backward sums each 2x2
// block of the gradient (CPU: float32/float64; CUDA: float32, float16, bfloat16).
Tensor upsample_nearest2x(const Tensor& x);

}  // namespace kestrel::ops
