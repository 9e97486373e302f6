// Differentiable elementwise ops on same-shape tensors, and in-place accumulation.
#pragma once
#include "engine/tensor.h"

namespace kestrel::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double scale);  // a * scale
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);

// dst += src (not recorded by autograd): gradient accumulation and optimizer updates.
void add_(const Tensor& dst, const Tensor& src);

}  // namespace kestrel::ops
