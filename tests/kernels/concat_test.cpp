// Concat on the CPU: values against a naive index-by-index implementation for every dimension,
// gradients against finite differences, and the refusal of mismatched inputs.
#include <string>

#include "engine/ops/concat.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

// Output element by element: find the input owning the coordinate along dim, read it there.
std::vector<double> naive_concat(const std::vector<Tensor>& xs, int64_t dim) {
  const int64_t rank = xs[0].dim();
  if (dim < 0) dim += rank;
  Shape out_shape = xs[0].shape();
  out_shape[dim] = 0;
  for (const Tensor& x : xs) out_shape[dim] += x.size(dim);
  std::vector<std::vector<double>> values;
  for (const Tensor& x : xs) values.push_back(x.to_double_vector());
  std::vector<double> out(shape_numel(out_shape));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    Shape idx(rank);
    for (int64_t d = rank - 1, rest = i; d >= 0; --d) {
      idx[d] = rest % out_shape[d];
      rest /= out_shape[d];
    }
    size_t k = 0;
    while (idx[dim] >= xs[k].size(dim)) idx[dim] -= xs[k++].size(dim);
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d) flat = flat * xs[k].size(d) + idx[d];
    out[i] = values[k][flat];
  }
  return out;
}

// Three inputs sized 1, 4 and 2 along dim, otherwise of `base` shape.
std::vector<Tensor> three_inputs(const Shape& base, int64_t dim, DType dtype, uint64_t seed) {
  std::vector<Tensor> xs;
  const int64_t d = dim < 0 ? dim + static_cast<int64_t>(base.size()) : dim;
  for (int64_t size : {1, 4, 2}) {
    Shape s = base;
    s[d] = size;
    xs.push_back(random_tensor(s, seed++, DType::F64, dtype == DType::U8 ? 0 : -1,
                               dtype == DType::U8 ? 256 : 1)
                     .to(dtype));
  }
  return xs;
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

class ConcatDims : public ::testing::TestWithParam<int64_t> {};

}  // namespace

TEST_P(ConcatDims, ValuesMatchNaive) {
  for (DType dtype : {DType::F32, DType::F64, DType::U8, DType::BF16}) {
    std::vector<Tensor> xs = three_inputs({2, 3, 5, 7}, GetParam(), dtype, 10);
    Tensor y = ops::concat(xs, GetParam());
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(y.to_double_vector(), naive_concat(xs, GetParam())) << dtype_name(dtype);
  }
}

TEST_P(ConcatDims, GradientsMatchFiniteDifferences) {
  for (const Shape& base : {Shape{2, 3, 5, 3}, Shape{1, 1, 3, 1}, Shape{3, 2, 1, 5}}) {
    std::vector<Tensor> xs = three_inputs(base, GetParam(), DType::F64, 20);
    for (Tensor& x : xs) x.set_requires_grad();
    const int64_t dim = GetParam();
    EXPECT_TRUE(
        gradcheck([dim](const std::vector<Tensor>& in) { return ops::concat(in, dim); }, xs));
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, ConcatDims, ::testing::Values(0, 1, 2, 3, -1, -3));

TEST(Concat, OnlyInputsRequiringGradReceiveOne) {
  Tensor a = random_tensor({2, 3, 3, 4}, 1).set_requires_grad();
  Tensor b = random_tensor({2, 3, 3, 5}, 2);
  Tensor c = random_tensor({2, 3, 3, 2}, 3).set_requires_grad();
  Tensor dy = random_tensor({2, 3, 3, 11}, 4);
  ops::concat({a, b, c}, -1).backward(dy);
  EXPECT_FALSE(b.grad().defined());
  EXPECT_EQ(a.grad().to_double_vector(), dy.slice(3, 0, 4).to_double_vector());
  EXPECT_EQ(c.grad().to_double_vector(), dy.slice(3, 9, 11).to_double_vector());
}

TEST(Concat, NonContiguousAndEmptyInputs) {
  // A permuted view is read through its strides; a piece with no channels adds nothing.
  Tensor nchw = random_tensor({2, 6, 3, 5}, 5, DType::F32);
  Tensor view = nchw.permute({0, 2, 3, 1});
  Tensor other = random_tensor({2, 3, 5, 2}, 6, DType::F32);
  Tensor empty = Tensor::empty({2, 3, 5, 0});
  Tensor y = ops::concat({view, empty, other}, 3);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 8}));
  EXPECT_EQ(y.to_double_vector(), naive_concat({view.contiguous(), other}, 3));
}

TEST(Concat, SingleInputIsACopy) {
  Tensor x = random_tensor({3, 4}, 7).set_requires_grad();
  Tensor y = ops::concat({x}, 1);
  EXPECT_FALSE(y.is_same(x));
  EXPECT_EQ(y.to_double_vector(), x.to_double_vector());
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::concat(in, 0); }, {x}));
}

TEST(Concat, MismatchedInputsAreRefused) {
  Tensor a = Tensor::zeros({2, 4, 4, 8});
  expect_error([&] { ops::concat({a, Tensor::zeros({2, 4, 5, 8})}, 3); }, "must match");
  expect_error([&] { ops::concat({a, Tensor::zeros({2, 4, 4})}, 2); }, "must match");
  expect_error([&] { ops::concat({a, Tensor::zeros({2, 4, 4, 8}, DType::F64)}, 3); }, "dtype");
  expect_error([&] { ops::concat({}, 0); }, "at least one");
  expect_error([&] { ops::concat({a, Tensor()}, 0); }, "undefined");
  expect_error([&] { ops::concat({a, a}, 4); }, "out of range");
  expect_error([&] { ops::concat({a, a}, -5); }, "out of range");
  expect_error([&] { ops::concat({Tensor::scalar(1.0), Tensor::scalar(2.0)}, 0); }, "0-d");
}
