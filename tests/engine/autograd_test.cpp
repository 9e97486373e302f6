// The backward engine: shared subgraphs, accumulation across backwards, hook timing and order,
// no-grad mode and the freeing of saved tensors.
#include "engine/autograd.h"

#include <vector>

#include "engine/ops/elementwise.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

Tensor vec(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, {n});
}

Tensor sum_of(const Tensor& t) {
  // A scalar from t without reductions: y = t[0] + t[1] + ... via slices and adds.
  Tensor acc = t.slice(0, 0, 1);
  for (int64_t i = 1; i < t.size(0); ++i) acc = ops::add(acc, t.slice(0, i, i + 1));
  return acc;
}

}  // namespace

TEST(Autograd, SharedSubgraphSumsBothPaths) {
  Tensor x = vec({1.0, 2.0, 3.0}).set_requires_grad();
  Tensor h = ops::mul(x, x);          // used twice below
  Tensor y = ops::add(ops::mul(h, 3.0), h);  // y = 4 x^2
  y.backward(vec({1.0, 1.0, 1.0}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{8.0, 16.0, 24.0}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwards) {
  Tensor x = vec({1.0, -2.0}).set_requires_grad();
  ops::mul(x, 2.0).backward(vec({1.0, 1.0}));
  ops::mul(x, 3.0).backward(vec({1.0, 1.0}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5.0, 5.0}));
}

TEST(Autograd, LeafGradientDoesNotAliasAnotherLeaf) {
  // AddBackward hands one gradient tensor to both inputs; later accumulation into one leaf must
  // not change the other's gradient.
  Tensor a = vec({1.0}).set_requires_grad();
  Tensor b = vec({2.0}).set_requires_grad();
  ops::add(a, b).backward(vec({1.0}));
  ops::mul(a, 10.0).backward(vec({1.0}));
  EXPECT_EQ(a.grad().item(), 11.0);
  EXPECT_EQ(b.grad().item(), 1.0);
}

TEST(Autograd, ReadyHookFiresOnceWithTheFinalGradient) {
  Tensor w = vec({2.0, 3.0}).set_requires_grad();
  Tensor x = vec({5.0, 7.0});
  std::vector<std::vector<double>> seen;
  w.register_grad_ready_hook([&](const Tensor& g) { seen.push_back(g.to_vector<double>()); });
  // w reaches the loss through three paths; the hook must see only the sum.
  Tensor y = ops::add(ops::add(ops::mul(w, x), ops::mul(w, 2.0)), w);
  y.backward(vec({1.0, 1.0}));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{8.0, 10.0}));
  y = ops::mul(w, x);
  y.backward(vec({1.0, 1.0}));
  ASSERT_EQ(seen.size(), 2u);  // once per backward, with the accumulated value
  EXPECT_EQ(seen[1], (std::vector<double>{13.0, 17.0}));
}

TEST(Autograd, HooksFireInReverseOrderOfUse) {
  // A chain of layers: the last layer's parameter is final first (what DDP overlap relies on).
  std::vector<Tensor> params;
  for (int i = 0; i < 4; ++i) params.push_back(vec({1.0 + i}).set_requires_grad());
  std::vector<int> order;
  for (int i = 0; i < 4; ++i)
    params[i].register_grad_ready_hook([&order, i](const Tensor&) { order.push_back(i); });
  Tensor h = vec({1.0});
  for (int i = 0; i < 4; ++i) h = ops::silu(ops::mul(h, params[i]));
  h.backward(vec({1.0}));
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
}

TEST(Autograd, UnusedLeafGetsNoGradientAndNoHook) {
  Tensor a = vec({1.0}).set_requires_grad();
  Tensor unused = vec({1.0}).set_requires_grad();
  int calls = 0;
  unused.register_grad_ready_hook([&](const Tensor&) { ++calls; });
  ops::mul(a, 2.0).backward(vec({1.0}));
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_EQ(calls, 0);
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = vec({1.0}).set_requires_grad();
  {
    autograd::NoGradGuard guard;
    Tensor y = ops::mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    EXPECT_THROW(y.backward(vec({1.0})), Error);
  }
  EXPECT_TRUE(ops::mul(x, 2.0).requires_grad());
}

TEST(Autograd, SavedTensorsAreFreedAfterBackward) {
  Tensor x = vec({1.0, 2.0}).set_requires_grad();
  Tensor y;
  std::weak_ptr<Storage> saved_storage;
  {
    Tensor h = ops::silu(x);  // MulBackward below saves h
    saved_storage = h.storage();
    y = ops::mul(h, h);
  }
  EXPECT_FALSE(saved_storage.expired());
  y.backward(vec({1.0, 1.0}));
  EXPECT_TRUE(saved_storage.expired()) << "backward without retain_graph keeps saved tensors";
  EXPECT_THROW(y.backward(vec({1.0, 1.0})), Error) << "second backward through a freed graph";
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = vec({3.0}).set_requires_grad();
  Tensor y = ops::mul(x, x);
  y.backward(vec({1.0}), /*retain_graph=*/true);
  y.backward(vec({1.0}));
  EXPECT_EQ(x.grad().item(), 12.0);
}

TEST(Autograd, ScalarRootNeedsNoGradient) {
  Tensor x = vec({1.5, 2.5}).set_requires_grad();
  Tensor s = sum_of(ops::mul(x, x));
  s.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3.0, 5.0}));
  Tensor v = ops::mul(x, 2.0);
  EXPECT_THROW(v.backward(), Error) << "a non-scalar root needs an explicit gradient";
}

TEST(Autograd, DetachCutsTheGraph) {
  Tensor x = vec({2.0}).set_requires_grad();
  Tensor y = ops::mul(ops::mul(x, x).detach(), x);  // d/dx = x^2 (detached part constant)
  y.backward(vec({1.0}));
  EXPECT_EQ(x.grad().item(), 4.0);
}

TEST(Autograd, SetRequiresGradOnlyOnFloatingLeaves) {
  Tensor x = vec({1.0}).set_requires_grad();
  EXPECT_THROW(ops::mul(x, 2.0).set_requires_grad(), Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::I32).set_requires_grad(), Error);
}
