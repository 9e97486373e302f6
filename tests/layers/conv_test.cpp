// The Conv block (conv -> BN -> SiLU): in eval mode without gradients it runs with BN folded into
// the convolution and must give what the three ops give (float32: the fold changes rounding
// only, so within a few ulp of the activations' scale); with gradients, or in training, it runs
// the convolution and the fused BN + SiLU (autograd reaches the BN parameters), or BN and SiLU
// separately when a replacement normalisation (SyncBN) is installed. fuse() keeps the folded
// copies until training or weight loading drops them.
#include "layers/conv.h"

#include <memory>
#include <set>

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/elementwise.h"
#include "engine/profiler.h"
#include "kernels/conv2d_dnnl.h"
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
  // Gradients on: conv, then the fused BN + SiLU, whose z is a float multiply-add where the
  // separate batch norm computes it in double (kernels/batchnorm_silu.h): a float rounding apart.
  const Tensor with_grad = block.forward(x);
  EXPECT_TRUE(all_close(with_grad, three_ops, 1e-6, 1e-6));
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
  layers::set_batch_norm(block, [&](const Tensor& in, const Tensor& w, const Tensor& b, const Tensor& rm,
                                    const Tensor& rv, bool training, double momentum, double eps,
                                    const Tensor& batches_tracked) {
    ++calls;
    return ops::batch_norm(in, w, b, rm, rv, training, momentum, eps, batches_tracked);
  });
  const Tensor separate = block.forward(x);
  EXPECT_EQ(calls, 1) << "the installed normalisation was bypassed";
  EXPECT_EQ(block.bn->num_batches_tracked.data<int64_t>()[0], 2);
  EXPECT_TRUE(all_close(separate, fused, 1e-5, 1e-5));
}

namespace {
// A Conv block with BN statistics and affine terms away from the identity.
std::unique_ptr<layers::Conv> block_with_statistics(uint64_t seed) {
  Generator gen(seed);
  auto block = std::make_unique<layers::Conv>(16, 24, 3, 1, std::nullopt, gen);
  block->bn->running_mean.copy_(random_tensor({24}, seed + 1, DType::F32, -0.5, 0.5));
  block->bn->running_var.copy_(random_tensor({24}, seed + 2, DType::F32, 0.2, 2.0));
  block->bn->weight.detach().copy_(random_tensor({24}, seed + 3, DType::F32, 0.5, 1.5));
  block->train(false);
  return block;
}

std::set<std::string> ops_run(layers::Conv& block, const Tensor& x, Tensor* y) {
  autograd::NoGradGuard no_grad;
  profiler::reset();
  profiler::enable(true);
  *y = block.forward(x);
  profiler::enable(false);
  std::set<std::string> ran;
  for (const auto& row : profiler::rows()) ran.insert(row.op);
  return ran;
}
}  // namespace

// fuse() folds once: later forwards fold nothing and reorder no filter, and give the unfused
// forward's bits (the same folded weights, the same primitive).
TEST(ConvBlock, FusedFoldsOnceAndGivesTheUnfusedBits) {
  auto block = block_with_statistics(30);
  const Tensor x = random_tensor({1, 12, 12, 16}, 34, DType::F32);
  Tensor unfused, fused;
  ops_run(*block, x, &unfused);
  block->fuse();
  ASSERT_TRUE(block->fused());
  ops_run(*block, x, &fused);  // the first fused call reorders the folded filter
  const auto before = kernels::conv2d_dnnl_weight_cache_stats();
  const std::set<std::string> ran = ops_run(*block, x, &fused);
  const auto after = kernels::conv2d_dnnl_weight_cache_stats();
  EXPECT_FALSE(ran.count("FoldBatchNorm")) << "a fused block folded again";
  EXPECT_FALSE(ran.count("Silu")) << "SiLU ran as its own pass";
  EXPECT_EQ(after.reorders, before.reorders) << "the fused filter was reordered again";
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_TRUE(all_close(fused, unfused, 0, 0));
}

// The folded copies must never outlive the weights they came from: a training-mode forward and
// unfuse_convs (which weight loading calls) drop them, and new weights then show.
TEST(ConvBlock, TrainingOrUnfusingDropsTheFoldedCopies) {
  auto block = block_with_statistics(40);
  const Tensor x = random_tensor({1, 10, 10, 16}, 44, DType::F32);
  block->fuse();
  block->train(true);
  block->forward(x);
  EXPECT_FALSE(block->fused()) << "a training forward kept the folded copies";
  block->train(false);

  layers::fuse_convs(*block);
  ASSERT_TRUE(block->fused());
  Tensor old_weights, new_weights;
  ops_run(*block, x, &old_weights);
  layers::unfuse_convs(*block);
  EXPECT_FALSE(block->fused());
  block->conv->weight.detach().copy_(random_tensor(block->conv->weight.shape(), 45, DType::F32));
  ops_run(*block, x, &new_weights);
  EXPECT_FALSE(all_close(new_weights, old_weights, 1e-3, 1e-3)) << "the old folded weights were used";
}
