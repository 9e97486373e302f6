// conv2d on the CPU: forward values against a naive direct convolution written here, gradients
// against finite differences in float64, float32 against float64, and the argument checks.
#include <functional>
#include <string>

#include "engine/autograd.h"
#include "engine/ops/conv.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

struct Geometry {
  Shape x;  // NHWC
  int64_t o, kh, kw;
  ops::Conv2dParams p;
  bool bias;
};

ops::Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  ops::Conv2dParams p;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_h = ph;
  p.pad_w = pw;
  return p;
}

std::string describe(const Geometry& g) {
  return str("x", shape_str(g.x), " o", g.o, " k", g.kh, "x", g.kw, " s", g.p.stride_h, ",",
             g.p.stride_w, " p", g.p.pad_h, ",", g.p.pad_w, g.bias ? " bias" : "");
}

void PrintTo(const Geometry& g, std::ostream* os) { *os << describe(g); }

// Direct convolution by the definition, in double, independent of the im2col path.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p) {
  const int64_t n = x.size(0), h = x.size(1), wd = x.size(2), c = x.size(3);
  const int64_t o = w.size(0), kh = w.size(1), kw = w.size(2);
  const int64_t oh = (h + 2 * p.pad_h - kh) / p.stride_h + 1;
  const int64_t ow = (wd + 2 * p.pad_w - kw) / p.stride_w + 1;
  const std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector();
  const std::vector<double> bv = b.defined() ? b.to_double_vector() : std::vector<double>(o, 0.0);
  std::vector<double> y(n * oh * ow * o);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q)
        for (int64_t k = 0; k < o; ++k) {
          double acc = bv[k];
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t ih = r * p.stride_h - p.pad_h + i, iw = q * p.stride_w - p.pad_w + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
              for (int64_t ch = 0; ch < c; ++ch)
                acc += xv[((in * h + ih) * wd + iw) * c + ch] *
                       wv[((k * kh + i) * kw + j) * c + ch];
            }
          y[((in * oh + r) * ow + q) * o + k] = acc;
        }
  return Tensor::from_vector(y, {n, oh, ow, o});
}

struct Inputs {
  Tensor x, w, b;
};

Inputs make_inputs(const Geometry& g, DType dtype, uint64_t seed) {
  Inputs in;
  in.x = random_tensor(g.x, seed, dtype);
  in.w = random_tensor({g.o, g.kh, g.kw, g.x[3]}, seed + 1, dtype);
  if (g.bias) in.b = random_tensor({g.o}, seed + 2, dtype);
  return in;
}

class Conv2dForward : public ::testing::TestWithParam<Geometry> {};

TEST_P(Conv2dForward, MatchesNaiveConvolution) {
  const Geometry& g = GetParam();
  SCOPED_TRACE(describe(g));
  // float64: both sides sum the same products exactly rounded; only the order differs.
  Inputs d = make_inputs(g, DType::F64, 11);
  EXPECT_TRUE(all_close(ops::conv2d(d.x, d.w, d.b, g.p), naive_conv2d(d.x, d.w, d.b, g.p), 1e-12,
                        1e-12));
  // float32 against the naive sum of the same float values in double: at most 108 products of
  // magnitude <= 1 per output, so float accumulation stays within ~1e-5.
  Inputs f = make_inputs(g, DType::F32, 12);
  EXPECT_TRUE(all_close(ops::conv2d(f.x, f.w, f.b, g.p), naive_conv2d(f.x, f.w, f.b, g.p), 2e-5,
                        1e-5));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dForward,
    ::testing::Values(Geometry{{1, 5, 7, 3}, 4, 1, 1, params(1, 1, 0, 0), true},   // pointwise
                      Geometry{{3, 9, 6, 5}, 2, 3, 3, params(1, 1, 1, 1), false},
                      Geometry{{1, 11, 9, 4}, 6, 3, 3, params(2, 2, 1, 1), true},  // odd H, W
                      Geometry{{3, 16, 13, 3}, 8, 6, 6, params(2, 2, 2, 2), true}, // YOLOv5 stem
                      Geometry{{1, 7, 8, 2}, 3, 3, 3, params(2, 2, 0, 0), false},
                      Geometry{{3, 6, 5, 3}, 2, 1, 1, params(2, 2, 0, 0), true},   // strided 1x1
                      Geometry{{1, 5, 5, 2}, 3, 3, 3, params(1, 1, 2, 2), true},   // output > input
                      Geometry{{3, 9, 7, 2}, 3, 3, 2, params(2, 1, 1, 0), true},   // H != W roles
                      Geometry{{1, 4, 4, 3}, 2, 4, 4, params(1, 1, 0, 0), false})); // 1x1 output

class Conv2dGrad : public ::testing::TestWithParam<Geometry> {};

TEST_P(Conv2dGrad, MatchesFiniteDifferences) {
  const Geometry& g = GetParam();
  SCOPED_TRACE(describe(g));
  Inputs in = make_inputs(g, DType::F64, 21);
  in.x.set_requires_grad();
  in.w.set_requires_grad();
  if (g.bias) in.b.set_requires_grad();
  const ops::Conv2dParams p = g.p;
  EXPECT_TRUE(gradcheck(
      [p](const std::vector<Tensor>& t) { return ops::conv2d(t[0], t[1], t[2], p); },
      {in.x, in.w, in.b}));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dGrad,
    ::testing::Values(Geometry{{2, 5, 4, 3}, 2, 3, 3, params(2, 2, 1, 1), true},
                      Geometry{{1, 7, 6, 2}, 2, 6, 6, params(2, 2, 2, 2), true},  // YOLOv5 stem
                      Geometry{{2, 3, 4, 3}, 2, 1, 1, params(1, 1, 0, 0), true},  // pointwise
                      Geometry{{1, 5, 6, 2}, 2, 3, 2, params(2, 1, 1, 0), false},
                      Geometry{{3, 4, 3, 1}, 1, 3, 3, params(1, 1, 2, 2), false}));

// float32 runs the sgemm paths of all three backward passes; float64 (checked above against
// finite differences) is the reference. Each gradient sums at most a few hundred products of
// magnitude <= 1, so float32 agrees to ~1e-5.
TEST(Conv2d, Float32GradientsMatchFloat64) {
  const Geometry g{{2, 9, 7, 4}, 5, 3, 3, params(2, 2, 1, 1), true};
  Inputs d = make_inputs(g, DType::F64, 31);
  Tensor dy = random_tensor({2, 5, 4, 5}, 34, DType::F64);
  Tensor xf = d.x.to(DType::F32).set_requires_grad(), wf = d.w.to(DType::F32).set_requires_grad();
  Tensor bf = d.b.to(DType::F32).set_requires_grad();
  d.x.set_requires_grad();
  d.w.set_requires_grad();
  d.b.set_requires_grad();
  ops::conv2d(d.x, d.w, d.b, g.p).backward(dy);
  ops::conv2d(xf, wf, bf, g.p).backward(dy.to(DType::F32));
  EXPECT_TRUE(all_close(xf.grad(), d.x.grad(), 2e-5, 1e-5));
  EXPECT_TRUE(all_close(wf.grad(), d.w.grad(), 2e-5, 1e-5));
  EXPECT_TRUE(all_close(bf.grad(), d.b.grad(), 2e-5, 1e-5));
}

TEST(Conv2d, GradientsOnlyWhereRequired) {
  Tensor x = random_tensor({1, 5, 5, 2}, 41), w = random_tensor({3, 3, 3, 2}, 42);
  Tensor b = random_tensor({3}, 43);
  w.set_requires_grad();
  Tensor y = ops::conv2d(x, w, b, params(1, 1, 1, 1));
  ASSERT_TRUE(y.requires_grad());
  y.backward(Tensor::ones(y.shape(), DType::F64));
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  autograd::NoGradGuard no_grad;
  EXPECT_FALSE(ops::conv2d(x, w, b, params(1, 1, 1, 1)).requires_grad());
}

TEST(Conv2d, NonContiguousInputsAreAccepted) {
  Tensor x = random_tensor({1, 4, 6, 3}, 51), w = random_tensor({2, 3, 3, 3}, 52);
  Tensor xt = x.transpose(1, 2).contiguous().transpose(1, 2);  // same values, permuted strides
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(all_close(ops::conv2d(xt, w, Tensor(), params(1, 1, 1, 1)),
                        naive_conv2d(x, w, Tensor(), params(1, 1, 1, 1)), 1e-12, 1e-12));
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Conv2d, BadArgumentsAreRefusedClearly) {
  const Tensor x = Tensor::zeros({1, 8, 8, 3}), w = Tensor::zeros({4, 3, 3, 3});
  const ops::Conv2dParams p = params(1, 1, 1, 1);
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 3, 3, 5}), Tensor(), p); }, "channels");
  expect_error([&] { ops::conv2d(Tensor::zeros({8, 8, 3}), w, Tensor(), p); }, "4-D NHWC");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 9, 3}), Tensor(), p); }, "4-D OHWI");
  expect_error([&] { ops::conv2d(x, w, Tensor::zeros({5}), p); }, "bias must be [4]");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 11, 11, 3}), Tensor(), p); },
               "empty output");
  expect_error([&] { ops::conv2d(x, w, Tensor(), params(0, 1, 1, 1)); }, "strides");
  expect_error([&] { ops::conv2d(x, w, Tensor(), params(1, 1, -1, 1)); }, "padding");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}, DType::F64), Tensor(), p); },
               "dtypes");
  expect_error([&] { ops::conv2d(x.to(DType::I32), w.to(DType::I32), Tensor(), p); },
               "float32 and float64");
  expect_error([&] { ops::conv2d(Tensor::zeros({0, 8, 8, 3}), w, Tensor(), p); },
               "empty dimension");
  expect_error([&] { ops::conv2d_backward_data(Tensor::zeros({1, 7, 8, 4}), w, x.shape(), p); },
               "output gradient must be [1, 8, 8, 4]");
  expect_error([&] { ops::conv2d_backward_bias(Tensor::zeros({4})); }, "4-D NHWC");
}

}  // namespace
