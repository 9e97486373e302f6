// Dropout from existing kernels: a uniform fill (Philox), then u + (1 - p) cast to uint8
// (truncation toward zero: 1 exactly when kept) and back to x's dtype, scaled by 1 / (1 - p), and
// an elementwise product, which carries the autograd.
#include "engine/ops/dropout.h"

#include "engine/ops/common.h"
#include "engine/ops/elementwise.h"
#include "kernels/elementwise.h"

namespace kestrel::ops {

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  check_kernel_dtype("dropout", x);
  KESTREL_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  Tensor mask;
  {
    autograd::NoGradGuard no_grad;
    const Tensor u = Tensor::empty(x.shape(), DType::F32, x.device());
    gen.fill_uniform(u, 0.0, 1.0);
    // shifted = u + (1 - p) in [1 - p, 2 - p): its integer part is 1 exactly when u >= p (up to
    // the float rounding of the sum).
    const Tensor shifted = Tensor::empty_like(u);
    launch(
        x.device(),
        [&] {
          kernels::affine_scalar_cpu(DType::F32, u.data_ptr(), shifted.data_ptr(), u.numel(), 1.0,
                                     1.0 - p);
        },
        [&](cudaStream_t s) {
          kernels::affine_scalar_cuda(DType::F32, u.data_ptr(), shifted.data_ptr(), u.numel(), 1.0,
                                      1.0 - p, s);
        });
    mask = mul(shifted.to(DType::U8).to(x.dtype()), 1.0 / (1.0 - p));
  }
  return mul(x, mask);
}

}  // namespace kestrel::ops
