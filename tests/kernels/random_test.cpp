// Philox4x32-10 and the Generator on the CPU: Random123's known-answer vectors, the (seed, stream,
// offset) layout, reproducibility of fill sequences and host draws, the accuracy of the shared
// log/sincos used by Box-Muller, and the moments of the uniform and normal fills.
#include <cmath>
#include <set>

#include "engine/random.h"
#include "kernels/random.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

struct KnownAnswer {
  philox::Block counter;
  philox::Key key;
  philox::Block expected;
};

// From Random123's kat_vectors (philox4x32_10).
const KnownAnswer kKnownAnswers[] = {
    {{{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
};

uint64_t join(uint32_t lo, uint32_t hi) { return (uint64_t(hi) << 32) | lo; }

std::vector<float> uniform_values(Generator& g, int64_t n, double lo, double hi) {
  Tensor t = Tensor::empty({n});
  g.fill_uniform(t, lo, hi);
  return t.to_vector<float>();
}

std::vector<float> normal_values(Generator& g, int64_t n, double mean, double std) {
  Tensor t = Tensor::empty({n});
  g.fill_normal(t, mean, std);
  return t.to_vector<float>();
}

struct Moments {
  double mean, var, skew, kurt;
};
Moments moments(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m += x;
  m /= v.size();
  double m2 = 0, m3 = 0, m4 = 0;
  for (float x : v) {
    const double d = x - m;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
  }
  m2 /= v.size();
  m3 /= v.size();
  m4 /= v.size();
  return {m, m2, m3 / std::pow(m2, 1.5), m4 / (m2 * m2)};
}

}  // namespace

TEST(Philox, KnownAnswerVectors) {
  for (const KnownAnswer& k : kKnownAnswers) {
    const philox::Block r = philox::philox4x32_10(k.counter, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.expected.v[i]) << "lane " << i;
  }
}

// The engine's (seed, stream, offset) is exactly Random123's (key, counter), low words first.
TEST(Philox, PositionLayoutMatchesKnownAnswers) {
  for (const KnownAnswer& k : kKnownAnswers) {
    const kernels::PhiloxPosition at{join(k.key.k[0], k.key.k[1]),
                                     join(k.counter.v[2], k.counter.v[3]),
                                     join(k.counter.v[0], k.counter.v[1])};
    uint32_t out[4];
    kernels::random_bits_cpu(at, out, 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.expected.v[i]) << "lane " << i;
  }
}

TEST(Philox, ElementIUsesLaneIMod4OfBlockOffsetPlusIDiv4) {
  const kernels::PhiloxPosition at{123, 7, 1000};
  std::vector<uint32_t> out(11);
  kernels::random_bits_cpu(at, out.data(), 11);
  for (int64_t i = 0; i < 11; ++i)
    EXPECT_EQ(out[i], philox::block_at(123, 7, 1000 + i / 4).v[i % 4]) << "element " << i;
}

TEST(Philox, UniformConversionIsExactOnTheGrid) {
  EXPECT_EQ(philox::uniform01(0), 0.0f);
  EXPECT_EQ(philox::uniform01(0xffffffffu), 1.0f - 0x1.0p-24f);
  EXPECT_EQ(philox::uniform01(0x80000000u), 0.5f);
  EXPECT_EQ(philox::uniform01(0x00000100u), 0x1.0p-24f);
  EXPECT_EQ(philox::uniform01(0x000000ffu), 0.0f);  // the low 8 bits are dropped
}

TEST(Philox, LogOfGridUniformIsAccurate) {
  // Every power of two, both sides of the sqrt(2) split, and a sweep over the whole range.
  std::vector<uint32_t> ms = {1, 2, 3, 5, 1u << 24, (1u << 24) - 1, 11863283, 11863284};
  for (int e = 0; e <= 24; ++e) ms.push_back(1u << e);
  for (uint32_t m = 1; m <= (1u << 24); m += 997) ms.push_back(m);
  for (uint32_t m : ms) {
    const double ref = std::log(double(m) * 0x1.0p-24);
    const double err = std::abs(double(philox::log_of_grid_uniform(m)) - ref);
    // About one float ulp of the result where |ln| > 1, two below (exhaustive worst: 1.07e-7).
    EXPECT_LE(err, 1.2e-7 * std::max(1.0, std::abs(ref))) << "m " << m;
  }
  EXPECT_EQ(philox::log_of_grid_uniform(1u << 24), 0.0f);
}

TEST(Philox, SinCosOfGridTurnAreAccurate) {
  std::vector<uint32_t> js = {0, 1, (1u << 21) - 1, 1u << 21, (1u << 22), (1u << 24) - 1};
  for (uint32_t q = 0; q < 4; ++q) js.push_back(q << 22);
  for (uint32_t j = 0; j < (1u << 24); j += 1231) js.push_back(j);
  for (uint32_t j : js) {
    float s, c;
    philox::sincos_of_grid_turn(j, &s, &c);
    const double angle = 2 * M_PI * double(j) * 0x1.0p-24;
    EXPECT_NEAR(s, std::sin(angle), 1.5e-7) << "j " << j;
    EXPECT_NEAR(c, std::cos(angle), 1.5e-7) << "j " << j;
  }
}

TEST(Generator, FillsAreReproducibleFromSeedStreamAndOffset) {
  Generator a(42, 3), b(42, 3);
  EXPECT_EQ(a.seed(), 42u);
  EXPECT_EQ(a.stream_id(), 3u);
  EXPECT_EQ(uniform_values(a, 1001, -1, 1), uniform_values(b, 1001, -1, 1));
  EXPECT_EQ(a.offset(), 251u);
  EXPECT_EQ(normal_values(a, 10, 0, 1), normal_values(b, 10, 0, 1));
  EXPECT_EQ(a.offset(), 254u);

  // A later fill depends only on the offset reached, not on how it was reached.
  Generator c(42, 3);
  c.set_offset(251);
  Generator d(42, 3);
  d.set_offset(251);
  EXPECT_EQ(normal_values(c, 10, 0, 1), normal_values(d, 10, 0, 1));
}

TEST(Generator, SequenceOfFillsFollowsTheBlockLayout) {
  Generator g(7);
  std::vector<float> big = uniform_values(g, 16, 0, 1);
  Generator h(7);
  std::vector<float> first = uniform_values(h, 10, 0, 1);  // blocks 0..2, two lanes unused
  EXPECT_EQ(h.offset(), 3u);
  std::vector<float> second = uniform_values(h, 4, 0, 1);  // block 3
  EXPECT_EQ(h.offset(), 4u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(first[i], big[i]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(second[i], big[12 + i]);
}

TEST(Generator, StreamsAndSeedsDiffer) {
  Generator a(1, 0), b(1, 1), c(2, 0);
  std::vector<float> va = uniform_values(a, 4096, 0, 1), vb = uniform_values(b, 4096, 0, 1),
                     vc = uniform_values(c, 4096, 0, 1);
  int same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    same_ab += va[i] == vb[i];
    same_ac += va[i] == vc[i];
  }
  // Two independent 24-bit grids agree at a given element with probability 2^-24.
  EXPECT_LE(same_ab, 1);
  EXPECT_LE(same_ac, 1);
}

TEST(Generator, UniformMomentsRangeAndHistogram) {
  Generator g(2024);
  const int64_t n = 1 << 20;
  const double lo = -2, hi = 3;
  std::vector<float> v = uniform_values(g, n, lo, hi);
  std::vector<int64_t> bins(16, 0);
  for (float x : v) {
    ASSERT_GE(x, lo);
    ASSERT_LT(x, hi);
    ++bins[std::min<int64_t>(15, int64_t((x - lo) / (hi - lo) * 16))];
  }
  const Moments m = moments(v);
  // Standard errors for n = 2^20: mean 1.4e-3, variance 1.8e-3; allow about 5 of them.
  EXPECT_NEAR(m.mean, 0.5, 0.007);
  EXPECT_NEAR(m.var, 25.0 / 12, 0.01);
  EXPECT_NEAR(m.skew, 0.0, 0.01);
  EXPECT_NEAR(m.kurt, 1.8, 0.01);
  double chi2 = 0;
  const double expect = double(n) / 16;
  for (int64_t c : bins) chi2 += (c - expect) * (c - expect) / expect;
  EXPECT_LT(chi2, 44.3);  // 99.99th percentile of chi-square with 15 degrees of freedom
}

TEST(Generator, UniformNeverReachesHi) {
  // hi one float ulp above lo: half of the grid would round up to hi without the clamp.
  Generator g(5);
  const float lo = 1.0f, hi = std::nextafter(1.0f, 2.0f);
  for (float x : uniform_values(g, 4096, lo, hi)) ASSERT_EQ(x, lo);
  for (float x : uniform_values(g, 4096, 0.5, 0.5)) ASSERT_EQ(x, 0.5f);
}

TEST(Generator, NormalMoments) {
  Generator g(99, 5);
  const int64_t n = 1 << 20;
  std::vector<float> v = normal_values(g, n, 0, 1);
  const Moments m = moments(v);
  // Standard errors for n = 2^20: mean 1e-3, variance 1.4e-3, skewness 2.4e-3, kurtosis 4.8e-3.
  EXPECT_NEAR(m.mean, 0.0, 0.005);
  EXPECT_NEAR(m.var, 1.0, 0.007);
  EXPECT_NEAR(m.skew, 0.0, 0.012);
  EXPECT_NEAR(m.kurt, 3.0, 0.025);
  int64_t within1 = 0, within2 = 0;
  for (float x : v) {
    within1 += std::abs(x) < 1;
    within2 += std::abs(x) < 2;
  }
  EXPECT_NEAR(double(within1) / n, 0.682689, 0.0025);
  EXPECT_NEAR(double(within2) / n, 0.954500, 0.0011);

  Generator h(99, 5);
  std::vector<float> w = normal_values(h, n, 3, 0.5);
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(w[i], std::fma(v[i], 0.5f, 3.0f));
}

TEST(Generator, FillsViewsInRowMajorOrder) {
  Tensor base = Tensor::zeros({5, 3});
  Tensor view = base.transpose(0, 1);  // 3 x 5, not contiguous
  Generator a(11);
  a.fill_uniform(view, 0, 1);
  Generator b(11);
  std::vector<float> expected = uniform_values(b, 15, 0, 1);
  EXPECT_EQ(view.contiguous().to_vector<float>(), expected);
  EXPECT_EQ(a.offset(), b.offset());
}

TEST(Generator, HostDrawsReadTheSameStreamLaneByLane) {
  Generator g(77, 2);
  std::vector<uint32_t> bits(8);
  kernels::random_bits_cpu({77, 2, 0}, bits.data(), 8);
  EXPECT_EQ(g.next_u32(), bits[0]);
  EXPECT_EQ(g.offset(), 1u);  // the partly read block counts as used
  EXPECT_EQ(g.next_u64(), (uint64_t(bits[1]) << 32) | bits[2]);
  EXPECT_EQ(g.next_u32(), bits[3]);
  EXPECT_EQ(g.next_u32(), bits[4]);
  EXPECT_EQ(g.offset(), 2u);
  // A fill starts at the next whole block, and host draws continue after it.
  Tensor t = Tensor::empty({4});
  g.fill_uniform(t, 0, 1);
  EXPECT_EQ(g.offset(), 3u);
  std::vector<uint32_t> block3(4);
  kernels::random_bits_cpu({77, 2, 3}, block3.data(), 4);
  EXPECT_EQ(g.next_u32(), block3[0]);
}

TEST(Generator, HostUniformAndRandint) {
  Generator g(3);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.004);  // 6 standard errors
  for (int i = 0; i < 1000; ++i) {
    const double x = g.uniform(-3, -1);
    ASSERT_GE(x, -3.0);
    ASSERT_LT(x, -1.0);
  }
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint64_t r = g.randint(7);
    ASSERT_LT(r, 7u);
    ++counts[r];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);  // 5 standard errors
  EXPECT_EQ(g.randint(1), 0u);
  const uint64_t big = g.randint(UINT64_MAX);
  EXPECT_LT(big, UINT64_MAX);

  Generator a(9), b(9);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.uniform(), b.uniform());
}

TEST(Generator, RefusesBadArguments) {
  Generator g(1);
  Tensor f32 = Tensor::empty({4});
  EXPECT_THROW(g.fill_uniform(Tensor::empty({4}, DType::F64), 0, 1), Error);
  EXPECT_THROW(g.fill_uniform(f32, 1, 0), Error);
  EXPECT_THROW(g.fill_uniform(f32, 0, INFINITY), Error);
  EXPECT_THROW(g.fill_uniform(f32, -3e38, 3e38), Error);  // width overflows float
  EXPECT_THROW(g.fill_normal(f32, 0, -1), Error);
  EXPECT_THROW(g.fill_normal(f32, NAN, 1), Error);
  EXPECT_THROW(g.fill_normal(Tensor(), 0, 1), Error);
  EXPECT_THROW(g.randint(0), Error);
  EXPECT_THROW(g.uniform(2, 1), Error);
  EXPECT_EQ(g.offset(), 0u);  // refused calls consume nothing
}
