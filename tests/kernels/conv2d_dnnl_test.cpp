// oneDNN float32 convolutions against the float64 im2col reference (kernels/conv2d_cpu.cpp, itself
// checked against a direct convolution and finite differences in conv2d_test.cpp), on YOLOv5's
// shapes; and the reordered-filter cache, which must never serve a stale filter.
//
// Tolerance: every output is a sum of K float32 products (K = KH*KW*C forward, O*KH*KW
// backward-data, N*OH*OW backward-weights and bias). Whatever order oneDNN sums them in, the
// float32 result differs from the exact sum of the same float32 inputs by at most
// (K + 2) * u * sum|terms| with u = 2^-24 (Higham's bound for recursive summation, one rounding
// per product and one for the bias), so the test states that bound per element, with
// sum|terms| computed by the reference on |x|, |w|, |dy|. It holds for any summation order and is
// still tight enough to fail on a wrong tap, stride or padding: those move outputs by whole terms
// (~0.3 each here), while the bound stays below 2e-4 * sum|terms| even for K = 2304.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/conv2d.h"
#include "kernels/conv2d_dnnl.h"

using namespace kestrel;
using namespace kestrel::kernels;

namespace {

struct Case {
  Conv2dShape s;
  bool bias;
  std::string name;
};

Conv2dShape shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t o, int64_t k, int64_t stride,
                  int64_t pad) {
  return Conv2dShape{.n = n, .h = h, .w = w, .c = c, .o = o, .kh = k, .kw = k,
                     .stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad};
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<float> random_floats(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<double> widen(const std::vector<float>& v, bool absolute = false) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = absolute ? std::fabs(double(v[i])) : double(v[i]);
  return d;
}

int64_t input_size(const Conv2dShape& s) { return s.n * s.h * s.w * s.c; }
int64_t output_size(const Conv2dShape& s) { return s.n * s.out_h() * s.out_w() * s.o; }
int64_t filter_size(const Conv2dShape& s) { return s.o * s.patch(); }

// Checks |got - exact| <= (K + 2) u magnitude elementwise; names the worst element.
::testing::AssertionResult within_bound(const std::vector<float>& got,
                                        const std::vector<double>& exact,
                                        const std::vector<double>& magnitude, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  double worst = 0.0;  // largest error / bound
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = (double(k) + 2.0) * u * magnitude[i] + 1e-30;
    const double ratio = std::fabs(double(got[i]) - exact[i]) / bound;
    if (ratio > worst) worst = ratio, at = i;
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << at << ": got " << got[at] << ", exact " << exact[at] << ", error "
         << std::fabs(double(got[at]) - exact[at]) << " exceeds (K + 2) u sum|terms| = "
         << (double(k) + 2.0) * std::ldexp(1.0, -24) * magnitude[at] << " (K = " << k << ")";
}

struct Data {
  std::vector<float> x, w, b, dy;
  Data(const Case& c)
      : x(random_floats(input_size(c.s), 1)), w(random_floats(filter_size(c.s), 2)),
        b(random_floats(c.s.o, 3)), dy(random_floats(output_size(c.s), 4)) {}
};

class Conv2dDnnl : public ::testing::TestWithParam<Case> {};

TEST_P(Conv2dDnnl, ForwardMatchesFloat64Reference) {
  const Case& c = GetParam();
  const Conv2dShape& s = c.s;
  Data d(c);
  std::vector<float> y(output_size(s));
  conv2d_forward_dnnl(s, d.x.data(), d.w.data(), conv2d_dnnl_new_weight_version(),
                      c.bias ? d.b.data() : nullptr, y.data());
  std::vector<double> exact(y.size()), magnitude(y.size());
  conv2d_forward_cpu(DType::F64, s, widen(d.x).data(), widen(d.w).data(),
                     c.bias ? widen(d.b).data() : nullptr, exact.data());
  conv2d_forward_cpu(DType::F64, s, widen(d.x, true).data(), widen(d.w, true).data(),
                     c.bias ? widen(d.b, true).data() : nullptr, magnitude.data());
  EXPECT_TRUE(within_bound(y, exact, magnitude, s.patch()));
}

TEST_P(Conv2dDnnl, BackwardDataMatchesFloat64Reference) {
  const Case& c = GetParam();
  const Conv2dShape& s = c.s;
  Data d(c);
  std::vector<float> dx(input_size(s), std::nanf(""));  // every element must be written
  conv2d_backward_data_dnnl(s, d.dy.data(), d.w.data(), kUncachedWeights, dx.data());
  std::vector<double> exact(dx.size()), magnitude(dx.size());
  conv2d_backward_data_cpu(DType::F64, s, widen(d.dy).data(), widen(d.w).data(), exact.data());
  conv2d_backward_data_cpu(DType::F64, s, widen(d.dy, true).data(), widen(d.w, true).data(),
                           magnitude.data());
  EXPECT_TRUE(within_bound(dx, exact, magnitude, s.o * s.kh * s.kw));
}

TEST_P(Conv2dDnnl, BackwardWeightsAndBiasMatchFloat64Reference) {
  const Case& c = GetParam();
  const Conv2dShape& s = c.s;
  Data d(c);
  std::vector<float> dw(filter_size(s), std::nanf("")), db(s.o, std::nanf(""));
  conv2d_backward_filter_dnnl(s, d.x.data(), d.dy.data(), dw.data(),
                              c.bias ? db.data() : nullptr);
  const int64_t rows = s.n * s.out_h() * s.out_w();
  std::vector<double> exact(dw.size()), magnitude(dw.size());
  conv2d_backward_filter_cpu(DType::F64, s, widen(d.x).data(), widen(d.dy).data(), exact.data());
  conv2d_backward_filter_cpu(DType::F64, s, widen(d.x, true).data(), widen(d.dy, true).data(),
                             magnitude.data());
  EXPECT_TRUE(within_bound(dw, exact, magnitude, rows));
  if (!c.bias) return;
  std::vector<double> db_exact(s.o), db_magnitude(s.o);
  conv2d_backward_bias_cpu(DType::F64, rows, s.o, widen(d.dy).data(), db_exact.data());
  conv2d_backward_bias_cpu(DType::F64, rows, s.o, widen(d.dy, true).data(), db_magnitude.data());
  EXPECT_TRUE(within_bound(db, db_exact, db_magnitude, rows));
}

INSTANTIATE_TEST_SUITE_P(
    YoloShapes, Conv2dDnnl,
    ::testing::Values(
        Case{shape(2, 33, 31, 3, 16, 6, 2, 2), false, "stem_6x6_s2_p2_c3_odd"},
        Case{shape(2, 16, 16, 3, 8, 6, 2, 2), true, "stem_6x6_s2_p2_c3_bias"},
        Case{shape(2, 10, 10, 32, 16, 1, 1, 0), false, "pointwise_1x1"},
        Case{shape(3, 7, 9, 64, 255, 1, 1, 0), true, "detect_1x1_bias_odd"},
        Case{shape(2, 9, 11, 16, 24, 3, 1, 1), false, "bottleneck_3x3_s1"},
        Case{shape(3, 13, 12, 16, 32, 3, 2, 1), false, "downsample_3x3_s2_odd"},
        Case{shape(1, 7, 9, 5, 7, 3, 2, 1), true, "downsample_3x3_s2_bias_batch1"},
        Case{shape(2, 6, 6, 256, 128, 3, 1, 1), false, "deep_3x3_k2304"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A filter rewritten in place under a new version is reordered again: the cached copy of the old
// values must not be used. The same version again is served from the cache.
TEST(Conv2dDnnlWeightCache, NewVersionSeesRewrittenFilter) {
  const Case c{shape(1, 8, 8, 16, 32, 3, 1, 1), false, "cache"};
  const Conv2dShape& s = c.s;
  Data d(c);
  std::vector<float> y(output_size(s)), expected(output_size(s));
  const auto run = [&](WeightVersion v) {
    conv2d_forward_dnnl(s, d.x.data(), d.w.data(), v, nullptr, y.data());
  };
  const auto reference = [&] {
    std::vector<double> exact(y.size());
    conv2d_forward_cpu(DType::F64, s, widen(d.x).data(), widen(d.w).data(), nullptr,
                       exact.data());
    return exact;
  };
  const auto magnitude = [&] {
    std::vector<double> m(y.size());
    conv2d_forward_cpu(DType::F64, s, widen(d.x, true).data(), widen(d.w, true).data(), nullptr,
                       m.data());
    return m;
  };

  const WeightVersion first = conv2d_dnnl_new_weight_version();
  run(first);
  EXPECT_TRUE(within_bound(y, reference(), magnitude(), s.patch()));

  const DnnlWeightCacheStats before_hit = conv2d_dnnl_weight_cache_stats();
  run(first);
  const DnnlWeightCacheStats after_hit = conv2d_dnnl_weight_cache_stats();
  EXPECT_EQ(after_hit.reorders, before_hit.reorders) << "same version: no reorder expected";
  EXPECT_EQ(after_hit.hits, before_hit.hits + 1);

  // The optimizer writes the filter in place (same pointer): the caller takes a new version.
  for (float& v : d.w) v = -0.5f * v + 0.25f;
  const WeightVersion second = conv2d_dnnl_new_weight_version();
  EXPECT_NE(second, first);
  run(second);
  EXPECT_EQ(conv2d_dnnl_weight_cache_stats().reorders, after_hit.reorders + 1);
  EXPECT_TRUE(within_bound(y, reference(), magnitude(), s.patch()))
      << "a stale reordered filter was used";

  // Uncached calls always read the buffer as it is now.
  for (float& v : d.w) v = 2.0f * v;
  run(kUncachedWeights);
  EXPECT_TRUE(within_bound(y, reference(), magnitude(), s.patch()));
}

// One filter buffer under one version, read by two configurations (another image size, and the
// backward-data layout): each gets its own reordered copy, none another's.
TEST(Conv2dDnnlWeightCache, ConfigurationsKeepSeparateCopies) {
  Conv2dShape small = shape(1, 6, 6, 8, 16, 3, 1, 1), large = shape(2, 12, 10, 8, 16, 3, 2, 1);
  std::vector<float> w = random_floats(filter_size(small), 5);
  const WeightVersion v = conv2d_dnnl_new_weight_version();
  for (const Conv2dShape& s : {small, large, small}) {
    std::vector<float> x = random_floats(input_size(s), 6), y(output_size(s));
    std::vector<float> dy = random_floats(output_size(s), 7), dx(input_size(s));
    conv2d_forward_dnnl(s, x.data(), w.data(), v, nullptr, y.data());
    conv2d_backward_data_dnnl(s, dy.data(), w.data(), v, dx.data());
    std::vector<double> exact(y.size()), magnitude(y.size());
    conv2d_forward_cpu(DType::F64, s, widen(x).data(), widen(w).data(), nullptr, exact.data());
    conv2d_forward_cpu(DType::F64, s, widen(x, true).data(), widen(w, true).data(), nullptr,
                       magnitude.data());
    EXPECT_TRUE(within_bound(y, exact, magnitude, s.patch()));
    std::vector<double> dx_exact(dx.size()), dx_magnitude(dx.size());
    conv2d_backward_data_cpu(DType::F64, s, widen(dy).data(), widen(w).data(), dx_exact.data());
    conv2d_backward_data_cpu(DType::F64, s, widen(dy, true).data(), widen(w, true).data(),
                             dx_magnitude.data());
    EXPECT_TRUE(within_bound(dx, dx_exact, dx_magnitude, s.o * s.kh * s.kw));
  }
}

TEST(Conv2dDnnl, NamesItsImplementation) {
  const Conv2dShape s = shape(1, 8, 8, 16, 16, 3, 1, 1);
  for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardFilter})
    EXPECT_FALSE(conv2d_dnnl_implementation(pass, s).empty()) << conv_pass_name(pass);
}

// One image through a 1x1 convolution (detect and val at batch 1) runs oneDNN's jit_1x1 kernel,
// chosen by shape (kernels/conv2d_dnnl.cpp), and still meets the float64 bound. Batches keep
// oneDNN's first choice.
TEST(Conv2dDnnl, OneImageOneByOneTakesJit1x1) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "jit_1x1 is checked on AVX2 CPUs";
  const Case c{shape(1, 20, 20, 64, 48, 1, 1, 0), true, "1x1"};
  EXPECT_EQ(conv2d_dnnl_implementation(ConvPass::Forward, c.s).rfind("jit_1x1", 0), 0u)
      << conv2d_dnnl_implementation(ConvPass::Forward, c.s);
  Data d(c);
  std::vector<float> y(output_size(c.s));
  conv2d_forward_dnnl(c.s, d.x.data(), d.w.data(), conv2d_dnnl_new_weight_version(), d.b.data(), y.data());
  std::vector<double> exact(y.size()), magnitude(y.size());
  conv2d_forward_cpu(DType::F64, c.s, widen(d.x).data(), widen(d.w).data(), widen(d.b).data(), exact.data());
  conv2d_forward_cpu(DType::F64, c.s, widen(d.x, true).data(), widen(d.w, true).data(),
                     widen(d.b, true).data(), magnitude.data());
  EXPECT_TRUE(within_bound(y, exact, magnitude, c.s.patch()));
}

// dw and db of a GEMM backward-weights path against float64.
void expect_gemm_backward_filter_within_bound(const Conv2dShape& s) {
  const Case c{s, true, "gemm"};
  Data d(c);
  std::vector<float> dw(filter_size(s)), db(s.o);
  conv2d_backward_filter_dnnl(s, d.x.data(), d.dy.data(), dw.data(), db.data());
  const int64_t terms = s.n * s.out_h() * s.out_w();
  std::vector<double> exact(dw.size()), magnitude(dw.size()), db_exact(s.o), db_magnitude(s.o);
  conv2d_backward_filter_cpu(DType::F64, s, widen(d.x).data(), widen(d.dy).data(), exact.data());
  conv2d_backward_filter_cpu(DType::F64, s, widen(d.x, true).data(), widen(d.dy, true).data(), magnitude.data());
  conv2d_backward_bias_cpu(DType::F64, terms, s.o, widen(d.dy).data(), db_exact.data());
  conv2d_backward_bias_cpu(DType::F64, terms, s.o, widen(d.dy, true).data(), db_magnitude.data());
  EXPECT_TRUE(within_bound(dw, exact, magnitude, terms));
  EXPECT_TRUE(within_bound(db, db_exact, db_magnitude, terms));
}

// Backward-weights of a 3x3 stride-2 convolution (and of a stride-1 one from 64 input channels)
// run as im2col + sgemm where oneDNN would take its older jit kernel (AVX2), and meet the float64
// bound with the bias gradient; a stride-1 one with few channels stays with oneDNN. The last shape
// (9 images of 40x40 outputs, 576-float patches: 3.7 MB of im2col an image) goes through in pieces
// of 2 images, each accumulating onto the pieces before.
TEST(Conv2dDnnl, ThreeByThreeBackwardWeightsTakeTheGemmWhereItWins) {
  if (!__builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "the choice is checked on AVX2 CPUs without AVX-512";
  EXPECT_EQ(conv2d_dnnl_implementation(ConvPass::BackwardFilter, shape(2, 10, 10, 16, 24, 3, 1, 1)).find("sgemm"),
            std::string::npos);
  for (const Conv2dShape& s : {shape(3, 13, 11, 8, 24, 3, 2, 1), shape(2, 7, 9, 64, 16, 3, 1, 1),
                               shape(9, 40, 40, 64, 8, 3, 1, 1)}) {
    EXPECT_EQ(conv2d_dnnl_implementation(ConvPass::BackwardFilter, s), "im2col+sgemm");
    expect_gemm_backward_filter_within_bound(s);
  }
}

// Backward-weights of a 1x1 stride-1 convolution without padding run as one sgemm over all images
// (NHWC: x is the rows x C matrix, no im2col) where oneDNN would take its jit_1x1 kernel (AVX2),
// and meet the float64 bound with the bias gradient; a padded or strided 1x1 stays with oneDNN.
TEST(Conv2dDnnl, OneByOneBackwardWeightsAreOneGemm) {
  if (!__builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "the choice is checked on AVX2 CPUs without AVX-512";
  EXPECT_EQ(conv2d_dnnl_implementation(ConvPass::BackwardFilter, shape(2, 10, 10, 32, 24, 1, 2, 0)).find("sgemm"),
            std::string::npos);
  EXPECT_EQ(conv2d_dnnl_implementation(ConvPass::BackwardFilter, shape(2, 10, 10, 32, 24, 1, 1, 1)).find("sgemm"),
            std::string::npos);
  for (const Conv2dShape& s : {shape(3, 13, 11, 40, 24, 1, 1, 0), shape(2, 5, 7, 256, 255, 1, 1, 0)}) {
    EXPECT_EQ(conv2d_dnnl_implementation(ConvPass::BackwardFilter, s), "sgemm");
    expect_gemm_backward_filter_within_bound(s);
  }
}

}  // namespace

// The SiLU post-op (inference): silu of the plain convolution's output, evaluated in double,
// within the convolution's own bound carried through silu (|silu'| < 1.1) plus a few ulp of the
// result for oneDNN's exp. Run on a stride-2 3x3 and a 1x1 shape with a bias, where the
// pre-activations span about -10..10 (both tails of the sigmoid).
TEST(Conv2dDnnl, SiluPostOpIsSiluOfTheConvolution) {
  for (const Conv2dShape& s : {shape(2, 13, 11, 24, 40, 3, 2, 1), shape(1, 9, 9, 64, 24, 1, 1, 0)}) {
    const std::vector<float> x = random_floats(input_size(s), 11), b = random_floats(s.o, 13);
    std::vector<float> w = random_floats(filter_size(s), 12);
    for (float& v : w) v *= 1.5f;
    std::vector<float> plain(output_size(s)), fused(output_size(s));
    conv2d_forward_dnnl(s, x.data(), w.data(), kUncachedWeights, b.data(), plain.data());
    conv2d_forward_dnnl(s, x.data(), w.data(), kUncachedWeights, b.data(), fused.data(),
                        ConvActivation::Silu);
    double worst = 0, lo = 0, hi = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      const double z = plain[i], want = z / (1.0 + std::exp(-z));
      const double bound = 1.1 * 1e-5 * (1.0 + std::fabs(z)) + 4 * std::ldexp(std::fabs(want), -23);
      worst = std::max(worst, std::fabs(fused[i] - want) / bound);
      lo = std::min(lo, z), hi = std::max(hi, z);
    }
    EXPECT_LE(worst, 1.0) << "the fused SiLU is not silu(conv)";
    EXPECT_LT(lo, -4.0) << "the case does not reach the sigmoid's lower tail";
    EXPECT_GT(hi, 4.0) << "the case does not reach the sigmoid's upper tail";
  }
}

// A SiLU primitive and a plain one of the same configuration keep separate reordered filters
// (their layouts may differ), and a fused caller's fixed version reorders once.
TEST(Conv2dDnnlWeightCache, PostOpPrimitivesKeepTheirOwnFilterCopy) {
  const Conv2dShape s = shape(1, 8, 8, 16, 32, 3, 1, 1);
  const std::vector<float> x = random_floats(input_size(s), 21), w = random_floats(filter_size(s), 22);
  std::vector<float> plain(output_size(s)), fused(output_size(s)), again(output_size(s));
  const WeightVersion v = conv2d_dnnl_new_weight_version();
  conv2d_forward_dnnl(s, x.data(), w.data(), v, nullptr, plain.data());
  const DnnlWeightCacheStats before = conv2d_dnnl_weight_cache_stats();
  conv2d_forward_dnnl(s, x.data(), w.data(), v, nullptr, fused.data(), ConvActivation::Silu);
  const DnnlWeightCacheStats middle = conv2d_dnnl_weight_cache_stats();
  conv2d_forward_dnnl(s, x.data(), w.data(), v, nullptr, again.data(), ConvActivation::Silu);
  const DnnlWeightCacheStats after = conv2d_dnnl_weight_cache_stats();
  EXPECT_EQ(middle.reorders, before.reorders + 1) << "the SiLU primitive read the plain one's copy";
  EXPECT_EQ(after.reorders, middle.reorders) << "a fixed version reordered the filter again";
  EXPECT_EQ(after.hits, middle.hits + 1);
  EXPECT_EQ(fused, again);
  for (size_t i = 0; i < plain.size(); ++i)
    ASSERT_NEAR(fused[i], plain[i] / (1.0 + std::exp(-double(plain[i]))), 1e-4) << i;
}
