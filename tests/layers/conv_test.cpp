// The Conv block (conv -> BN -> SiLU): in eval mode without gradients it runs with BN folded into
// the convolution and must give what the three ops give (float32: the fold changes rounding
// only, so within a few ulp of the activations' scale); with gradients, or in training, it keeps
// the three ops (autograd reaches the BN parameters).
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
  const Tensor with_grad = block.forward(x);  // gradients on: the unfused path
  EXPECT_TRUE(all_close(with_grad, three_ops, 0, 0));
  EXPECT_GT(block.conv->last_macs(), 0);
}
