// CUDA sums and means against the CPU reference, at shapes that reach every kernel plan: short
// rows (one thread per row), a warp per row (short rows, and long ones when there are 8192+),
// long rows in block chunks over two passes, columns (reduced dims leading, as in per-channel
// NHWC sums) narrow, wide and split over two passes, a middle block with outer > 1, a permuted
// multi-block reduction, and an empty reduced extent.
//
// Two kinds of inputs:
//  - small integers: every partial sum is an integer below 2^24, so float accumulation is exact
//    in any order and the CUDA result must equal the CPU's bit for bit after the one rounding to
//    the output dtype (both round to nearest even). Any lost, repeated or misplaced element fails.
//  - uniform reals in [-1, 1): CUDA accumulates in float, so each output may differ from the
//    double-accumulated reference by (additions on the longest path) x 2^-24 x sum|x|. The longest
//    path here is under 100 additions (a thread's share of its chunk, at most 50; a shuffle or
//    shared-memory tree of at most 8 levels; the second pass over the partials and its tree);
//    the bound uses 256.
#include <cmath>
#include <random>

#include "engine/ops/reduce.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;

namespace {

struct Case {
  Shape shape;
  std::vector<int64_t> dims;
};

const Case kCases[] = {
    {{1000, 7}, {1}},
    {{5}, {0}},
    {{300, 1000}, {1}},
    {{3, 50000}, {1}},
    {{1 << 20}, {}},
    {{20000, 33}, {-1}},
    {{8192, 1030}, {1}},
    {{4, 6, 5, 3}, {1, 3}},
    {{37, 5}, {0}},
    {{4, 40, 40, 128}, {0, 1, 2}},
    {{100000, 3}, {0}},
    {{2, 100000}, {0}},
    {{16, 20, 20, 64}, {1, 2}},
    {{3, 77, 45}, {1}},
    {{0, 5}, {0}},
};

std::vector<float> values(const Shape& shape, uint64_t seed, bool integers) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<float> real(-1.f, 1.f);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v) x = integers ? static_cast<float>(small(rng)) : real(rng);
  return v;
}

std::string describe(const Case& c, DType dt) {
  return shape_str(c.shape) + " dims " + shape_str(c.dims) + " " + dtype_name(dt);
}

// Elementwise |a - b| == 0, with the worst element named.
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  return all_close(a, b, 0.0, 0.0);
}

const DType kDTypes[] = {DType::F32, DType::BF16, DType::F16};

// One rounding of a float result to the output dtype: its relative half-ulp, doubled to cover the
// float reference's own rounding. float16 results below 2^-14 are subnormal, with a fixed spacing
// of 2^-24, hence an absolute term for them.
double output_rtol(DType dt) {
  return dt == DType::BF16 ? 1.0 / 128 : dt == DType::F16 ? 1.0 / 1024 : 2.0 / (1 << 23);
}
double output_atol(DType dt) { return dt == DType::F16 ? std::ldexp(1.0, -24) : 0.0; }

}  // namespace

TEST(ReduceCuda, IntegerSumsAreExact) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Case& c : kCases) {
    Tensor host = Tensor::from_vector(values(c.shape, 21, true), c.shape);
    for (DType dt : kDTypes) {
      SCOPED_TRACE(describe(c, dt));
      Tensor x = host.to(dt).to(gpu);
      for (bool keepdim : {false, true}) {
        Tensor got = ops::sum(x, c.dims, keepdim);
        Tensor want = ops::sum(host, c.dims, keepdim).to(dt);
        ASSERT_EQ(got.shape(), want.shape());
        EXPECT_EQ(got.dtype(), dt);
        EXPECT_TRUE(bitwise_equal(got, want));
      }
      // The mean multiplies the exact sum by float(1/n) on CUDA and by the double 1/n on the CPU:
      // each within an ulp of the output dtype of the true mean.
      if (shape_numel(c.shape) > 0) {
        EXPECT_TRUE(all_close(ops::mean(x, c.dims), ops::mean(host, c.dims), output_atol(dt),
                              output_rtol(dt)));
      }
    }
  }
}

TEST(ReduceCuda, RealSumsWithinFloatAccumulationBound) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c, DType::F32));
    std::vector<float> v = values(c.shape, 22, false), a(v.size());
    for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]);
    Tensor host = Tensor::from_vector(v, c.shape);
    std::vector<double> got = ops::sum(host.to(gpu), c.dims).to_double_vector();
    std::vector<double> want = ops::sum(host.to(DType::F64), c.dims).to_double_vector();
    std::vector<double> magnitude =
        ops::sum(Tensor::from_vector(a, c.shape), c.dims).to_double_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 256 * std::ldexp(1.0, -24) * magnitude[i]) << "output " << i;
  }
}

TEST(ReduceCuda, RunsAreBitwiseReproducible) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Case& c : kCases) {
    for (DType dt : kDTypes) {
      SCOPED_TRACE(describe(c, dt));
      Tensor x = Tensor::from_vector(values(c.shape, 23, false), c.shape).to(dt).to(gpu);
      EXPECT_TRUE(bitwise_equal(ops::mean(x, c.dims), ops::mean(x, c.dims)));
    }
  }
}

TEST(ReduceCuda, NonContiguousInputs) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Shape shape{4, 33, 17, 24};
  Tensor host = Tensor::from_vector(values(shape, 24, true), shape);
  Tensor x = host.to(gpu);
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0, 2, 3}, {1}, {}, {1, 3}}) {
    SCOPED_TRACE("dims " + shape_str(dims));
    EXPECT_TRUE(bitwise_equal(ops::sum(x.permute({0, 3, 1, 2}), dims),
                              ops::sum(host.permute({0, 3, 1, 2}), dims)));
    EXPECT_TRUE(bitwise_equal(ops::sum(x.slice(1, 3, 30, 2), dims),
                              ops::sum(host.slice(1, 3, 30, 2), dims)));
  }
}

// Backward broadcasts the output gradient: copies for a sum (exact), one multiply by 1/n then a
// rounding to the dtype for a mean.
TEST(ReduceCuda, GradientsMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Case& c :
       {Case{{4, 9, 7, 40}, {0, 1, 2}}, Case{{5, 300}, {1}}, Case{{3, 4, 5}, {0, 2}}}) {
    for (DType dt : kDTypes) {
      SCOPED_TRACE(describe(c, dt));
      Tensor host = Tensor::from_vector(values(c.shape, 25, false), c.shape).to(dt).to(DType::F32);
      Tensor x = host.to(dt).to(gpu).set_requires_grad();
      Tensor xc = host.detach().set_requires_grad();
      Tensor s = ops::sum(x, c.dims, true);
      Tensor g = Tensor::from_vector(values(s.shape(), 26, false), s.shape()).to(dt);
      s.backward(g.to(gpu));
      ops::sum(xc, c.dims, true).backward(g.to(DType::F32));
      EXPECT_TRUE(bitwise_equal(x.grad(), xc.grad()));

      x.set_grad(Tensor());
      xc.set_grad(Tensor());
      Tensor m = ops::mean(x, c.dims), mc = ops::mean(xc, c.dims);
      m.backward(g.reshape(m.shape()).to(gpu));
      mc.backward(g.to(DType::F32).reshape(mc.shape()));
      EXPECT_TRUE(all_close(x.grad(), xc.grad(), output_atol(dt), output_rtol(dt)));
    }
  }
}
