// Small helpers every op uses: argument checks, and (from launch.h) the dispatch to the CPU or
// CUDA kernel with the stream to launch on.
#pragma once
#include "engine/autograd.h"
#include "engine/ops/launch.h"
#include "engine/tensor.h"

namespace kestrel::ops {

// Same device and dtype (and shape unless same_shape=false); the message names the op.
void check_compatible(const char* op, const Tensor& a, const Tensor& b, bool same_shape = true);

// The floating dtypes the op kernels of a device take: float32 and float64 (the reference) on
// the CPU; float32, float16 and bfloat16 on CUDA.
bool kernel_float_dtype(Device d, DType t);
// t is defined and of such a dtype; otherwise a kestrel::Error naming op, the device's dtypes
// and the fix.
void check_kernel_dtype(const char* op, const Tensor& t);

}  // namespace kestrel::ops
