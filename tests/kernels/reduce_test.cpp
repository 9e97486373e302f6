// Sums and means on the CPU: values against a naive multi-index loop written here, gradients
// against finite differences in float64, and the argument errors.
#include "engine/ops/reduce.h"

#include <cmath>
#include <limits>

#include "kernels/reduce.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

// Sum over the masked dims by visiting every input element and adding it to its output slot.
std::vector<double> naive_sum(const Tensor& x, const std::vector<bool>& mask) {
  const Shape& shape = x.shape();
  std::vector<double> values = x.to_double_vector();
  int64_t out_numel = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!mask[d]) out_numel *= shape[d];
  std::vector<double> out(out_numel, 0.0);
  std::vector<int64_t> index(shape.size(), 0);
  for (double v : values) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      if (!mask[d]) o = o * shape[d] + index[d];
    out[o] += v;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<bool> mask_of(int64_t rank, const std::vector<int64_t>& dims) {
  std::vector<bool> mask(rank, dims.empty());
  for (int64_t d : dims) mask[d < 0 ? d + rank : d] = true;
  return mask;
}

Shape expected_shape(const Shape& shape, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!mask[d] || keepdim) out.push_back(mask[d] ? 1 : shape[d]);
  return out;
}

struct Case {
  Shape shape;
  std::vector<int64_t> dims;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << shape_str(c.shape) << " dims " << shape_str(c.dims);
}

// Every grouping of reduced dims: leading (per-channel NHWC), trailing (rows), middle, several
// separate blocks (a permuting copy), size-1 dims, negative dims, and all dims.
const Case kCases[] = {
    {{7}, {0}},
    {{7}, {}},
    {{7}, {-1}},
    {{2, 3, 4, 5}, {0}},
    {{2, 3, 4, 5}, {3}},
    {{2, 3, 4, 5}, {1}},
    {{2, 3, 4, 5}, {0, 1, 2}},
    {{2, 3, 4, 5}, {1, 2}},
    {{2, 3, 4, 5}, {0, 2}},
    {{2, 3, 4, 5}, {1, 3}},
    {{2, 3, 4, 5}, {0, 3}},
    {{2, 3, 4, 5}, {-1, -3}},
    {{2, 3, 4, 5}, {}},
    {{3, 1, 5, 1, 2}, {1}},
    {{3, 1, 5, 1, 2}, {0, 1}},
    {{3, 1, 5, 1, 2}, {1, 3}},
    {{3, 1, 5, 1, 2}, {0, 2, 4}},
    {{2, 9, 11, 19}, {0, 1, 2}},
    {{3, 37, 2}, {1}},
};

void expect_values(const Tensor& x, const Case& c) {
  const std::vector<bool> mask = mask_of(x.dim(), c.dims);
  const std::vector<double> expected = naive_sum(x, mask);
  int64_t count = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[d]) count *= x.shape()[d];
  // float64 sums differ from the naive order by a few ulps; float32 results are the double sum
  // rounded once to float.
  const double rtol = x.dtype() == DType::F64 ? 1e-14 : 1e-7;
  for (bool keepdim : {false, true}) {
    Tensor s = ops::sum(x, c.dims, keepdim);
    Tensor m = ops::mean(x, c.dims, keepdim);
    ASSERT_EQ(s.shape(), expected_shape(x.shape(), mask, keepdim));
    ASSERT_EQ(m.shape(), s.shape());
    EXPECT_EQ(s.dtype(), x.dtype());
    std::vector<double> sv = s.to_double_vector(), mv = m.to_double_vector();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(sv[i], expected[i], 1e-12 + rtol * std::abs(expected[i])) << "sum element " << i;
      EXPECT_NEAR(mv[i], expected[i] / count, 1e-12 + rtol * std::abs(expected[i] / count))
          << "mean element " << i;
    }
  }
}

}  // namespace

TEST(Reduce, ValuesMatchNaiveLoop) {
  for (const Case& c : kCases) {
    for (DType dt : {DType::F64, DType::F32}) {
      SCOPED_TRACE(shape_str(c.shape) + " dims " + shape_str(c.dims) + " " + dtype_name(dt));
      expect_values(random_tensor(c.shape, 11, dt), c);
    }
  }
}

TEST(Reduce, NonContiguousInputs) {
  Tensor base = random_tensor({4, 6, 5, 3}, 12);
  Tensor permuted = base.permute({0, 3, 1, 2});  // an NCHW view of NHWC data
  Tensor sliced = base.slice(1, 1, 6, 2).slice(3, -2, 3);
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{0, 2, 3}, {1}, {3}, {0, 2}, {}, {1, 3}}) {
    SCOPED_TRACE("dims " + shape_str(dims));
    expect_values(permuted, {permuted.shape(), dims});
    expect_values(sliced, {sliced.shape(), dims});
  }
}

TEST(Reduce, AllAndScalars) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = ops::sum_all(x), m = ops::mean_all(x);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(m.dim(), 0);
  EXPECT_EQ(s.item(), 21.0);
  EXPECT_EQ(m.item(), 3.5);
  EXPECT_EQ(ops::sum(x, {}, true).shape(), (Shape{1, 1}));
  Tensor scalar = Tensor::scalar(2.5, DType::F32);
  EXPECT_EQ(ops::sum_all(scalar).item(), 2.5);
  EXPECT_EQ(ops::mean_all(scalar).item(), 2.5);
}

// 2^24 + 1 + 1 + ... in float would stay at 2^24 (each +1 rounds back to even); the double
// accumulator gets 2^24 + n, which float represents exactly for even n.
TEST(Reduce, FloatInputsAccumulateInDouble) {
  Tensor x = Tensor::from_vector<float>({16777216.f, 1.f, 1.f, 1.f, 1.f}, {5});
  EXPECT_EQ(ops::sum_all(x).item(), 16777220.0);
  std::vector<float> longer(21, 1.f);
  longer[0] = 16777216.f;
  EXPECT_EQ(ops::sum_all(Tensor::from_vector(longer, {21})).item(), 16777236.0);
  Tensor cols =
      Tensor::from_vector<float>({16777216.f, 0.f, 1.f, 2.f, 1.f, 2.f, 1.f, 2.f, 1.f, 2.f}, {5, 2});
  EXPECT_EQ(ops::sum(cols, {0}).to_vector<float>(), (std::vector<float>{16777220.f, 8.f}));
}

TEST(Reduce, EmptyExtents) {
  Tensor x = Tensor::zeros({0, 3});
  Tensor s = ops::sum(x, {0});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  for (double v : ops::mean(x, {0}).to_double_vector()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(ops::sum(x, {1}).shape(), (Shape{0}));
}

TEST(Reduce, KernelShapesWithScale) {
  // [outer, reduce, inner] = [2, 3, 2] with scale 0.5, against hand-summed values.
  std::vector<double> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<double> out(4, -1);
  kernels::sum_cpu(DType::F64, in.data(), out.data(), {2, 3, 2}, 0.5);
  EXPECT_EQ(out, (std::vector<double>{4.5, 6, 13.5, 15}));
  kernels::sum_cpu(DType::F64, in.data(), out.data(), {4, 0, 1}, 1.0);
  EXPECT_EQ(out, (std::vector<double>{0, 0, 0, 0}));
}

TEST(Reduce, BadArgumentsAreRefused) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(ops::sum(x, {2}), Error);
  EXPECT_THROW(ops::sum(x, {-3}), Error);
  EXPECT_THROW(ops::sum(x, {1, -1}), Error);
  EXPECT_THROW(ops::mean(x, {0, 0}), Error);
  EXPECT_THROW(ops::sum_all(Tensor::zeros({2}, DType::I32)), Error);
  EXPECT_THROW(ops::sum_all(Tensor::zeros({2}, DType::BF16)), Error);
  EXPECT_THROW(ops::sum_all(Tensor()), Error);
  EXPECT_THROW(ops::sum_to(x, {2, 2}), Error);
  EXPECT_THROW(ops::sum_to(x, {1, 2, 3}), Error);
  EXPECT_THROW(ops::sum_to(x, {2, 1, 3}), Error);
  try {
    ops::sum(x, {5});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum: dimension 5 out of range"), std::string::npos)
        << e.what();
  }
}

TEST(Reduce, SumToValues) {
  Tensor g = random_tensor({2, 3, 4}, 13);
  const std::vector<std::pair<Shape, std::vector<int64_t>>> targets = {
      {{3, 4}, {0}},   {{3, 1}, {0, 2}}, {{1, 4}, {0, 1}}, {{4}, {0, 1}},
      {{}, {0, 1, 2}}, {{2, 1, 4}, {1}}, {{1, 1, 1}, {}},  {{2, 3, 1}, {2}}};
  for (const auto& [target, dims] : targets) {
    SCOPED_TRACE("to " + shape_str(target));
    Tensor s = ops::sum_to(g, target);
    EXPECT_EQ(s.shape(), target);
    std::vector<double> expected = naive_sum(g, mask_of(3, dims));
    std::vector<double> got = s.to_double_vector();
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-12);
  }
  EXPECT_TRUE(ops::sum_to(g, g.shape()).is_same(g));
}

class ReduceGrad : public ::testing::TestWithParam<Case> {};

TEST_P(ReduceGrad, MatchesFiniteDifferences) {
  const Case c = GetParam();
  Tensor x = random_tensor(c.shape, 14).set_requires_grad();
  for (bool keepdim : {false, true}) {
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::sum(in[0], c.dims, keepdim); }, {x}));
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::mean(in[0], c.dims, keepdim); }, {x}));
  }
  // Through a view: the gradient flows back through permute into the original layout.
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        Tensor t = in[0].transpose(0, -1);
        return ops::mean(ops::sum(t, c.dims, true), {});
      },
      {x}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReduceGrad,
                         ::testing::Values(Case{{7}, {0}}, Case{{2, 3, 5}, {1}},
                                           Case{{2, 3, 5}, {0, 2}}, Case{{3, 1, 4, 5}, {0, 1, 2}},
                                           Case{{3, 1, 4, 5}, {-1}}, Case{{3, 4, 1}, {}}));

TEST(Reduce, SumToGradient) {
  Tensor g = random_tensor({2, 3, 4}, 15).set_requires_grad();
  for (const Shape& target : {Shape{3, 4}, Shape{3, 1}, Shape{}, Shape{2, 1, 4}}) {
    SCOPED_TRACE("to " + shape_str(target));
    EXPECT_TRUE(
        gradcheck([&](const std::vector<Tensor>& in) { return ops::sum_to(in[0], target); }, {g}));
  }
}
