// CUDA elementwise kernels against the CPU reference. Tolerances: fp32 within 1e-6 relative
// (expf differs from the host's by an ulp or two); bf16/fp16 inputs are rounded identically on
// both sides, so the outputs differ by at most one rounding of the result (2^-8 / 2^-11 relative).
#include "engine/ops/elementwise.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

struct Case {
  DType dtype;
  double rtol;
};

class ElementwiseCuda : public ::testing::TestWithParam<Case> {};

// CPU reference on the same (rounded) values, computed in float32.
Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()).to(DType::F32); }

}  // namespace

TEST_P(ElementwiseCuda, ForwardAndBackwardMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const auto [dtype, rtol] = GetParam();
  const Device gpu = Device::cuda(0);
  Tensor x = random_tensor({3, 17, 33, 5}, 7, DType::F32, -6, 6).to(dtype).to(gpu);
  Tensor y = random_tensor({3, 17, 33, 5}, 8, DType::F32, -6, 6).to(dtype).to(gpu);
  Tensor xc = on_cpu(x), yc = on_cpu(y);
  EXPECT_TRUE(all_close(ops::silu(x), ops::silu(xc), 1e-6, rtol));
  EXPECT_TRUE(all_close(ops::sigmoid(x), ops::sigmoid(xc), 1e-6, rtol));
  EXPECT_TRUE(all_close(ops::add(x, y), ops::add(xc, yc), 1e-6, rtol));
  EXPECT_TRUE(all_close(ops::sub(x, y), ops::sub(xc, yc), 1e-6, rtol));
  EXPECT_TRUE(all_close(ops::mul(x, y), ops::mul(xc, yc), 1e-6, rtol));

  Tensor xg = x.detach().set_requires_grad();
  Tensor xcg = xc.detach().set_requires_grad();
  Tensor dy = random_tensor(x.shape(), 9, DType::F32).to(dtype);
  ops::silu(xg).backward(dy.to(gpu));
  ops::silu(xcg).backward(on_cpu(dy));
  EXPECT_TRUE(all_close(xg.grad(), xcg.grad(), 1e-5, rtol * 2));

  // Sigmoid's backward, dy·σ(x)·(1 − σ(x)), through the same kernels family.
  Tensor xs = x.detach().set_requires_grad();
  Tensor xcs = xc.detach().set_requires_grad();
  ops::sigmoid(xs).backward(dy.to(gpu));
  ops::sigmoid(xcs).backward(on_cpu(dy));
  EXPECT_TRUE(all_close(xs.grad(), xcs.grad(), 1e-5, rtol * 2));
}

INSTANTIATE_TEST_SUITE_P(DTypes, ElementwiseCuda,
                         ::testing::Values(Case{DType::F32, 1e-6}, Case{DType::BF16, 1.0 / 128},
                                           Case{DType::F16, 1.0 / 1024}));
