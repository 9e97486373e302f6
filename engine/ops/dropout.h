// Training-mode dropout (the reference's nn.Dropout in train()), with autograd.
#pragma once
#include "engine/random.h"
#include "engine/tensor.h"

namespace kestrel::ops {

// Inverted dropout: each element kept with probability 1 - p and scaled by 1 / (1 - p), else 0;
// p in [0, 1]. p == 0 returns x itself (no draw, no copy); p == 1 gives zeros. The mask is drawn
// from `gen` (one float32 uniform per element, in row-major order of x's shape, on x's device:
// Generator::fill_uniform), so a run is reproducible from the generator's seed, stream and offset,
// on the CPU and CUDA alike; an element is kept when its uniform u satisfies u + (1 - p) >= 1 in
// float32. Differentiable: dx = g * mask. Any float dtype the elementwise kernels take.
Tensor dropout(const Tensor& x, double p, Generator& gen);

}  // namespace kestrel::ops
