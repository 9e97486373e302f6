// BN folding on CUDA against the CPU reference: float32 weights fold to the same values up to
// the device's sqrt/division rounding (a few ulp); bfloat16 and float16 weights fold in float32
// and round once, so they match the CPU float32 fold rounded to that dtype within one ulp.
#include "engine/ops/fold_bn.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

TEST(FoldBnCuda, MatchesTheCpuFold) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor w = random_tensor({64, 3, 3, 32}, 1, DType::F32);
  const Tensor gamma = random_tensor({64}, 2, DType::F32, 0.5, 1.5), beta = random_tensor({64}, 3, DType::F32);
  const Tensor mean = random_tensor({64}, 4, DType::F32), var = random_tensor({64}, 5, DType::F32, 0.01, 2.0);
  const ops::FoldedConv cpu = ops::fold_batch_norm(w, gamma, beta, mean, var, 1e-3);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const ops::FoldedConv dev =
        ops::fold_batch_norm(w.to(t).to(gpu), gamma.to(gpu), beta.to(gpu), mean.to(gpu), var.to(gpu), 1e-3);
    const double rtol = t == DType::F32 ? 1e-6 : (t == DType::BF16 ? 1.6e-2 : 2e-3);
    EXPECT_TRUE(all_close(dev.weight.to(Device::cpu()).to(DType::F32), cpu.weight, 1e-6, rtol)) << dtype_name(t);
    EXPECT_TRUE(all_close(dev.bias.to(Device::cpu()), cpu.bias, 1e-6, 1e-6)) << dtype_name(t);
  }
}
