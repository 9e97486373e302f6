// Views and copies of engine/ops/shape.cpp: reshape, permute, transpose, slice, contiguous, clone
// and to(dtype). Values against indexing written out here; gradients against finite differences
// in float64, through chains of these ops; errors for bad dims.
#include <cmath>
#include <numeric>

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::GradcheckOptions;
using kestrel::testing::random_tensor;

namespace {

Tensor iota(const Shape& shape) {
  std::vector<double> v(shape_numel(shape));
  std::iota(v.begin(), v.end(), 0.0);
  return Tensor::from_vector(v, shape);
}

}  // namespace

TEST(Shape, ReshapeIsAViewOfContiguousData) {
  Tensor x = iota({2, 3, 4});
  Tensor r = x.reshape({4, -1});
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  EXPECT_EQ(r.to_double_vector(), x.to_double_vector());
  EXPECT_EQ(r.data_ptr(), x.data_ptr());  // shares storage
  x.fill_(5.0);
  EXPECT_EQ(r.to_double_vector(), std::vector<double>(24, 5.0));
  EXPECT_EQ(iota({6}).reshape({-1, 1, 2}).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(iota({1}).reshape({}).dim(), 0);
  EXPECT_EQ(Tensor::zeros({0, 4}).reshape({-1}).shape(), (Shape{0}));
}

TEST(Shape, ReshapeOfNonContiguousCopies) {
  Tensor x = iota({2, 3});
  Tensor r = x.transpose(0, 1).reshape({6});
  EXPECT_NE(r.data_ptr(), x.data_ptr());
  EXPECT_EQ(r.to_double_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Shape, ReshapeErrors) {
  Tensor x = iota({2, 3});
  EXPECT_THROW(x.reshape({4}), Error);
  EXPECT_THROW(x.reshape({-1, -1}), Error);
  EXPECT_THROW(x.reshape({4, -1}), Error);
  EXPECT_THROW(x.reshape({0, -1}), Error);
  // Negative sizes other than the single -1 are not shapes, even when their product matches.
  EXPECT_THROW(x.reshape({-2, -3}), Error);
  EXPECT_THROW(x.reshape({-6}), Error);
}

TEST(Shape, PermuteAndTranspose) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  std::vector<double> v = p.contiguous().to_double_vector();
  int64_t i = 0;
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b) EXPECT_EQ(v[i++], (a * 3 + b) * 4 + c);
  EXPECT_EQ(x.permute({-1, 0, -2}).shape(), (Shape{4, 2, 3}));
  Tensor t = x.transpose(-1, 0);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.contiguous().to_double_vector(),
            x.permute({2, 1, 0}).contiguous().to_double_vector());
  EXPECT_THROW(x.permute({0, 1}), Error);
  EXPECT_THROW(x.permute({0, 1, 1}), Error);
  EXPECT_THROW(x.permute({0, 1, 3}), Error);
  EXPECT_THROW(x.permute({0, -4, 1}), Error);
  EXPECT_THROW(x.transpose(0, 3), Error);
  EXPECT_THROW(x.transpose(-4, 0), Error);
}

TEST(Shape, Slice) {
  Tensor x = iota({10});
  EXPECT_EQ(x.slice(0, 2, 5).to_double_vector(), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(x.slice(0, -3, 10).to_double_vector(), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(x.slice(0, 1, -1, 3).to_double_vector(), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(x.slice(0, 0, 10, 4).to_double_vector(), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(x.slice(0, -100, 100).numel(), 10);  // clamped to the extent
  EXPECT_EQ(x.slice(0, 6, 3).numel(), 0);        // empty, not an error
  Tensor m = iota({3, 4});
  Tensor s = m.slice(-1, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.strides(), (Shape{4, 2}));
  EXPECT_EQ(s.to_double_vector(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  EXPECT_THROW(x.slice(1, 0, 1), Error);
  EXPECT_THROW(x.slice(-2, 0, 1), Error);
  EXPECT_THROW(x.slice(0, 0, 5, 0), Error);
  EXPECT_THROW(x.slice(0, 5, 0, -1), Error);
}

TEST(Shape, ContiguousAndClone) {
  Tensor x = iota({3, 4});
  EXPECT_TRUE(x.contiguous().is_same(x));
  Tensor c = x.slice(1, 1, 3).contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_double_vector(), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  Tensor k = x.clone();
  EXPECT_NE(k.data_ptr(), x.data_ptr());
  x.fill_(0.0);
  EXPECT_EQ(k.to_double_vector()[11], 11.0);  // the clone owns its memory
}

TEST(Shape, ToDType) {
  Tensor x = Tensor::from_vector<double>({1.25, -2.5, 1.0 / 3.0}, {3});
  EXPECT_TRUE(x.to(DType::F64).is_same(x));
  EXPECT_TRUE(x.to(Device::cpu()).is_same(x));
  Tensor f = x.to(DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.25f, -2.5f, 1.0f / 3.0f}));
  EXPECT_EQ(x.to(DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 0}));
  // Gradients flow back to the source dtype; an integer result carries none.
  Tensor xg = x.detach().set_requires_grad();
  Tensor y = xg.to(DType::F32);
  EXPECT_TRUE(y.requires_grad());
  y.backward(Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_EQ(xg.grad().dtype(), DType::F64);
  EXPECT_EQ(xg.grad().to_double_vector(), (std::vector<double>{1, 2, 3}));
  EXPECT_FALSE(xg.to(DType::I32).requires_grad());
}

TEST(Shape, ViewsDoNotRecordUnderNoGrad) {
  Tensor x = iota({2, 3}).set_requires_grad();
  autograd::NoGradGuard guard;
  EXPECT_FALSE(x.reshape({3, 2}).requires_grad());
  EXPECT_FALSE(x.transpose(0, 1).requires_grad());
  EXPECT_FALSE(x.slice(0, 0, 1).requires_grad());
  EXPECT_FALSE(x.clone().requires_grad());
}

class ShapeGrad : public ::testing::TestWithParam<Shape> {};

TEST_P(ShapeGrad, SingleOps) {
  Tensor x = random_tensor(GetParam(), 41).set_requires_grad();
  const int64_t r = x.dim();
  auto check = [&](const std::function<Tensor(const Tensor&)>& f) {
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}));
  };
  check([](const Tensor& t) { return t.reshape({-1}); });
  check([r](const Tensor& t) {
    std::vector<int64_t> rev(r);
    std::iota(rev.rbegin(), rev.rend(), 0);
    return t.permute(rev);
  });
  check([](const Tensor& t) { return t.transpose(0, -1); });
  check([](const Tensor& t) { return t.slice(-1, 1, t.size(-1), 2); });
  check([](const Tensor& t) { return t.slice(0, -2, t.size(0)); });
  check([](const Tensor& t) { return t.transpose(0, -1).contiguous(); });
  check([](const Tensor& t) { return t.clone(); });
}

TEST_P(ShapeGrad, Chains) {
  Tensor x = random_tensor(GetParam(), 42).set_requires_grad();
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor t = in[0].transpose(0, -1).slice(0, 0, in[0].size(-1), 2).contiguous();
        return ops::mul(t.reshape({-1}).clone(), t.reshape({-1}));
      },
      {x}));
  // Overlapping slices of one input: their gradients add up where they overlap.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        const int64_t n = in[0].size(0);
        return ops::add(in[0].slice(0, 0, n - 1), in[0].slice(0, 1, n));
      },
      {x}));
  // Through float32 and back: rounding to float makes small differences coarse, so the step is
  // large and the tolerance covers float's 2^-24 relative rounding divided by the step.
  GradcheckOptions coarse;
  coarse.eps = 1e-3;
  coarse.atol = 1e-3;
  coarse.rtol = 1e-3;
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor t = in[0].to(DType::F32).transpose(0, -1).slice(0, 1, in[0].size(-1));
        return ops::mul(t.to(DType::F64), 2.0);
      },
      {x}, coarse));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ShapeGrad,
                         ::testing::Values(Shape{5, 3}, Shape{2, 3, 5}, Shape{3, 1, 4, 7}));
