// The Conv block (conv -> BN -> SiLU): in eval mode without gradients it runs with BN folded into
// the convolution and must give what the three ops give (float32: the fold changes rounding
// only, so within a few ulp of the activations' scale); with gradients, or in training, it runs
// the convolution and the fused BN + SiLU (autograd reaches the BN parameters), or BN and SiLU
// separately when a replacement normalisation (SyncBN) is installed.
#include "layers/conv.h"

#include <set>

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/elementwise.h"
#include "engine/profiler.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

TEST(ConvBlock, EvalWithoutGradientsFoldsBatchNormAndAgrees) {
  Generator gen(7);
  layers::Conv block(16, 32, 3, 2, std::nullopt, gen);
  block.bn->running_mean.copy_(random_tensor({32}, 1, DType::F32, -0.5, 0.5));
  block.bn->running_var.copy_(random_tensor({32}, 2, DType::F32, 0.2, 2.0));
  block.bn->weight.detach().copy_(random_tensor({32}, 3, DType::F32, 0.5, 1.5));
  block.train(false);
  const Tensor x = random_tensor({2, 20, 20, 16}, 4, DType::F32);
  Tensor three_ops;
  {
    autograd::NoGradGuard no_grad;
    const Tensor y = block.conv->forward(x);
    three_ops = ops::silu(ops::batch_norm(y, block.bn->weight, block.bn->bias, block.bn->running_mean,
                                          block.bn->running_var, false, block.bn->momentum, block.bn->eps));
    profiler::reset();
    profiler::enable(true);
    const Tensor folded = block.forward(x);
    profiler::enable(false);
    EXPECT_TRUE(all_close(folded, three_ops, 1e-5, 1e-5));
    std::set<std::string> ran;
    for (const auto& row : profiler::rows()) ran.insert(row.op);
    EXPECT_TRUE(ran.count("FoldBatchNorm") && !ran.count("BatchNorm")) << "the eval forward did not fold";
  }
  const Tensor with_grad = block.forward(x);  // gradients on: conv, then the fused BN + SiLU
  EXPECT_TRUE(all_close(with_grad, three_ops, 0, 0));
  EXPECT_GT(block.conv->last_macs(), 0);
}

TEST(ConvBlock, TrainingRunsTheFusedBatchNormSiluOrTheInstalledNormalisation) {
  Generator gen(8);
  layers::Conv block(8, 16, 1, 1, std::nullopt, gen);
  block.train(true);
  const Tensor x = random_tensor({2, 6, 6, 8}, 5, DType::F32);
  profiler::reset();
  profiler::enable(true);
  const Tensor fused = block.forward(x);
  profiler::enable(false);
  std::set<std::string> ran;
  for (const auto& row : profiler::rows()) ran.insert(row.op);
  EXPECT_TRUE(ran.count("BatchNormSilu") && !ran.count("Silu")) << "training did not fuse";
  EXPECT_EQ(block.bn->num_batches_tracked.data<int64_t>()[0], 1);

  int calls = 0;
  block.bn->norm = [&](const Tensor& in, const Tensor& w, const Tensor& b, const Tensor& rm,
                       const Tensor& rv, bool training, double momentum, double eps,
                       const Tensor& batches_tracked) {
    ++calls;
    return ops::batch_norm(in, w, b, rm, rv, training, momentum, eps, batches_tracked);
  };
  const Tensor separate = block.forward(x);
  EXPECT_EQ(calls, 1) << "the installed normalisation was bypassed";
  EXPECT_EQ(block.bn->num_batches_tracked.data<int64_t>()[0], 2);
  EXPECT_TRUE(all_close(separate, fused, 1e-5, 1e-5));
}
