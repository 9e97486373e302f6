// The CPU fast-path helpers: exp_approx against exp in double (ulp error over the whole float
// range, overflow, underflow, NaN), and parallel_chunks' fixed chunking on 1 and 2 threads.
#include "kernels/cpu_simd.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using kestrel::kernels::exp_approx;
using kestrel::kernels::parallel_chunks;

namespace {

// |approx - exact| in units of the last place of the float nearest to exact.
double ulp_error(float approx, double exact) {
  const float nearest = static_cast<float>(exact);
  const double ulp = std::ldexp(1.0, std::ilogb(nearest) - 23);
  return std::abs(double(approx) - exact) / ulp;
}

}  // namespace

// Every 61st float with a normal exp (x in [-87.33, 88.72]): about 36 million points, both signs,
// all exponents. 1.02 ulp is what the polynomial reaches; 2 leaves room for FMA contraction
// (this file's copy is compiled for baseline x86-64, without FMA; the kernels' AVX2/AVX-512
// clones contract, and elementwise_test checks them through SiLU) and stays far below what a
// wrong coefficient or range reduction gives (thousands of ulps).
TEST(CpuSimd, ExpIsWithinTwoUlpOverTheNormalRange) {
  double worst = 0;
  float worst_x = 0;
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 61) {
    float x;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&x, &b, sizeof x);
    if (!(x > -87.33f && x < 88.72f)) continue;
    const double e = ulp_error(exp_approx(x), std::exp(double(x)));
    if (e > worst) worst = e, worst_x = x;
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

TEST(CpuSimd, ExpOverflowsUnderflowsAndPropagatesNaNAsExpf) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-0.0f), 1.0f);
  EXPECT_EQ(exp_approx(88.73f), inf);
  EXPECT_EQ(exp_approx(100.0f), inf);
  EXPECT_EQ(exp_approx(inf), inf);
  EXPECT_EQ(exp_approx(-inf), 0.0f);
  EXPECT_EQ(exp_approx(-110.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_approx(1e-30f), 1.0f);
  EXPECT_EQ(exp_approx(-1e-30f), 1.0f);
  EXPECT_EQ(exp_approx(1.4e-45f), 1.0f);  // the smallest subnormal
  // The largest finite result, and subnormal results: within two steps of their spacing (the
  // polynomial's relative error, up to one step at the top of the subnormals, plus rounding).
  EXPECT_LE(ulp_error(exp_approx(88.72f), std::exp(double(88.72f))), 2.0);
  for (float x : {-87.5f, -95.0f, -100.0f, -103.0f}) {
    const double exact = std::exp(double(x));
    EXPECT_LE(std::abs(double(exp_approx(x)) - exact), 2 * 1.4013e-45) << x;
  }
}

TEST(CpuSimd, ParallelChunksCoverTheRangeInFixedChunksOnAnyThreadCount) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int64_t n : {0, 1, 99, 100, 101, 1000}) {
      std::vector<int> hits(n, 0);
      std::vector<int64_t> starts(n + 1, -1);
      parallel_chunks(n, 100, [&](int64_t b, int64_t e) {
        starts[b] = e;
        for (int64_t i = b; i < e; ++i) ++hits[i];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n " << n << " i " << i;
      for (int64_t b = 0; b < n; ++b) {
        if (b % 100 == 0)
          EXPECT_EQ(starts[b], std::min<int64_t>(n, b + 100)) << "n " << n << " b " << b;
        else
          EXPECT_EQ(starts[b], -1) << "n " << n << " b " << b;
      }
    }
  }
}

TEST(CpuSimd, ASingleChunkRunsOnTheCallingThread) {
  omp_set_num_threads(2);
  int team = 0;
  parallel_chunks(50, 100, [&](int64_t, int64_t) { team = omp_get_num_threads(); });
  EXPECT_EQ(team, 1);
  int teams = 0;
  parallel_chunks(200, 100, [&](int64_t b, int64_t) {
    if (b == 0) teams = omp_get_num_threads();
  });
  EXPECT_EQ(teams, 2);
}
