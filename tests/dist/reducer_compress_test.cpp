// The Reducer's --grad-compress on in-process ranks (tests/dist/fake_group.h, which sums 16-bit
// types in float rounding each partial sum, as NCCL and Gloo do): compressed buckets give the
// fp32 average within the 16-bit roundings and the same bits on every rank, exactly the fp32
// average where every value is representable; fp16 turns a gradient past its range into inf while
// bf16 keeps it; float64 parameters are never compressed (tests/dist/reducer_compress_rig.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/dist/reducer_compress_rig.h"

namespace kestrel::dist {
namespace {

using testing::GradFn;
using testing::kN;
using testing::kParams;
using testing::reduce_once;

double average(const GradFn& grad, int ranks, int j, int64_t i) {
  double s = 0;
  for (int r = 0; r < ranks; ++r) s += grad(r, j, i);
  return s / ranks;
}

TEST(ReducerCompressTest, MatchesTheFp32AverageWithinHalfPrecisionRounding) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<double> values(4 * kParams * kN);
  for (double& v : values) v = static_cast<float>(unit(rng));
  const GradFn grad = [&](int r, int j, int64_t i) { return values[(r * kParams + j) * kN + i]; };
  for (GradCompress c : {GradCompress::F16, GradCompress::BF16}) {
    for (int ranks : {2, 3, 4}) {
      SCOPED_TRACE(grad_compress_name(c) + ", " + std::to_string(ranks) + " ranks");
      // One rounding of each rank's value, one of its quotient, one per partial sum.
      const double u = c == GradCompress::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const auto got = reduce_once(ranks, c, grad);
      const auto fp32 = reduce_once(ranks, GradCompress::None, grad);
      int differs = 0;
      for (int j = 0; j < kParams; ++j)
        for (int64_t i = 0; i < kN; ++i) {
          double magnitude = 0;
          for (int r = 0; r < ranks; ++r) magnitude += std::abs(grad(r, j, i)) / ranks;
          const double want = average(grad, ranks, j, i);
          ASSERT_LE(std::abs(got[0][j][i] - want), (ranks + 2) * u * magnitude + ranks * std::ldexp(1.0, -24))
              << "w" << j << "[" << i << "]";
          for (int r = 1; r < ranks; ++r) ASSERT_EQ(got[r][j][i], got[0][j][i]) << "rank " << r;
          differs += got[0][j][i] != fp32[0][j][i];
        }
      EXPECT_GT(differs, kParams * kN / 2) << "the buckets were not compressed";
    }
  }
}

TEST(ReducerCompressTest, RepresentableValuesGiveTheFp32AverageExactly) {
  // Multiples of 1/8 up to 16: every cast, quotient by 2 and sum is exact in both 16-bit types.
  const GradFn grad = [](int r, int j, int64_t i) {
    return static_cast<double>((i * 7 + j * 5 + r * 11) % 257 - 128) / 8;
  };
  const auto fp32 = reduce_once(2, GradCompress::None, grad);
  for (GradCompress c : {GradCompress::F16, GradCompress::BF16}) {
    const auto got = reduce_once(2, c, grad);
    for (int j = 0; j < kParams; ++j)
      for (int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(got[0][j][i], fp32[0][j][i]) << grad_compress_name(c) << " w" << j << "[" << i << "]";
        ASSERT_EQ(got[0][j][i], average(grad, 2, j, i));
      }
  }
}

TEST(ReducerCompressTest, Fp16OverflowsToInfWhereBf16KeepsTheRange) {
  // Rank 0 holds 70000 (past fp16's 65504) in w1[5]; everything else is 1.
  const GradFn grad = [](int r, int j, int64_t i) { return r == 0 && j == 1 && i == 5 ? 70000.0 : 1.0; };
  const auto f16 = reduce_once(2, GradCompress::F16, grad);
  const auto b16 = reduce_once(2, GradCompress::BF16, grad);
  EXPECT_EQ(f16[0][1][5], std::numeric_limits<double>::infinity());
  EXPECT_EQ(f16[1][1][5], std::numeric_limits<double>::infinity());
  EXPECT_EQ(f16[0][1][4], 1.0);  // its neighbours are untouched
  // bf16: 70000 -> 70144 (8 significant bits), halved, plus 0.5, rounded to bf16's 256 spacing.
  EXPECT_EQ(b16[0][1][5], 35072.0);
  EXPECT_EQ(b16[0][1][4], 1.0);
}

TEST(ReducerCompressTest, Float64ParametersAreNotCompressed) {
  const GradFn grad = [](int r, int j, int64_t i) { return 1.0 / 3 + r * 1e-9 + j + i * 1e-3; };
  const auto got = reduce_once(2, GradCompress::F16, grad, DType::F64);
  for (int j = 0; j < kParams; ++j)
    for (int64_t i = 0; i < kN; ++i) ASSERT_NEAR(got[0][j][i], average(grad, 2, j, i), 1e-15);
}

TEST(ReducerCompressTest, ParsesTheFlagsSpelling) {
  EXPECT_EQ(parse_grad_compress("fp16"), GradCompress::F16);
  EXPECT_EQ(parse_grad_compress("bf16"), GradCompress::BF16);
  EXPECT_EQ(parse_grad_compress("none"), GradCompress::None);
  EXPECT_FALSE(parse_grad_compress("int8").has_value());
  EXPECT_EQ(grad_compress_dtype(GradCompress::BF16), DType::BF16);
}

}  // namespace
}  // namespace kestrel::dist
