// Layout conversions between NCHW (files, the reference's tensors) and NHWC (every activation
// here), and the conversion of u8 image batches into network input on the device.
#pragma once
#include "engine/tensor.h"

namespace kestrel::ops {

// [N, C, H, W] -> [N, H, W, C] and back. Any dtype (u8 image batches included); differentiable
// for floating dtypes, the backward of each being the other.
Tensor nchw_to_nhwc(const Tensor& x);
Tensor nhwc_to_nchw(const Tensor& x);

// u8 images [N, H, W, C] -> `dtype` [N, H, W, C] holding pixel * scale, in one pass (the data
// loader hands u8 NHWC batches to the device, normalisation happens there). With the default
// scale, float32 output equals the reference's `img.float() / 255` bit for bit; bfloat16/float16
// output is that float32 value rounded once. CPU: float32/float64; CUDA: float32, float16,
// bfloat16. Not differentiable (the input is integer).
Tensor images_to_input(const Tensor& images, DType dtype, double scale = 1.0 / 255.0);

}  // namespace kestrel::ops
