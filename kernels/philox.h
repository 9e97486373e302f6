// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator of Random123, cuRAND and the well-known frameworks, and the conversions
// from its 32-bit outputs to uniform and normal floats. Everything is __host__ __device__ and
// built from integer operations and correctly rounded float operations (+, *, /, sqrt, and fma
// written out explicitly), so the CPU and CUDA produce bitwise-identical numbers: no library
// logf/sinf/cosf (whose last bits differ between glibc and CUDA), no reliance on the compiler's
// choice to contract a*b+c.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/dtype.h"

namespace kestrel::philox {

struct Block {
  uint32_t v[4];
};
struct Key {
  uint32_t k[2];
};

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
constexpr int kRounds = 10;

KESTREL_HD inline uint32_t mulhi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

KESTREL_HD inline Block round_once(Block c, Key k) {
  const uint32_t hi0 = mulhi(kMul0, c.v[0]), lo0 = kMul0 * c.v[0];
  const uint32_t hi1 = mulhi(kMul1, c.v[2]), lo1 = kMul1 * c.v[2];
  return {{hi1 ^ c.v[1] ^ k.k[0], lo1, hi0 ^ c.v[3] ^ k.k[1], lo0}};
}

KESTREL_HD inline Key bump(Key k) { return {{k.k[0] + kWeyl0, k.k[1] + kWeyl1}}; }

// The full 10-round bijection of a 128-bit counter under a 64-bit key.
KESTREL_HD inline Block philox4x32_10(Block counter, Key key) {
  counter = round_once(counter, key);
  for (int r = 1; r < kRounds; ++r) {
    key = bump(key);
    counter = round_once(counter, key);
  }
  return counter;
}

// Kestrel's stream layout: key = seed; counter = (block index, stream id), both 64-bit, low word
// first. Block b of stream s holds the 4 values that element 4b..4b+3 of a fill use.
KESTREL_HD inline Block block_at(uint64_t seed, uint64_t stream, uint64_t block) {
  const Block counter = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                          static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  const Key key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return philox4x32_10(counter, key);
}

// --- exact float helpers ----------------------------------------------------------------------

// A single rounding of a*b+c on both sides (hardware FMA on the GPU, IEEE fmaf on the host).
KESTREL_HD inline float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// Correctly rounded on both sides even under -use_fast_math, which would approximate / and sqrt.
KESTREL_HD inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KESTREL_HD inline float sqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

KESTREL_HD inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
KESTREL_HD inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// --- uniform ----------------------------------------------------------------------------------

// The top 24 bits scaled by 2^-24: every value of [0, 1) on a 2^-24 grid, each equally likely,
// exactly representable in float.
KESTREL_HD inline float uniform01(uint32_t x) {
  return static_cast<float>(x >> 8) * 5.9604644775390625e-8f;
}

// lo + scale * u with one rounding, clamped to `top` (the largest float below hi) so rounding
// never reaches hi. The host computes lo, scale and top once from the double arguments.
struct UniformParams {
  float lo;
  float scale;
  float top;
};
KESTREL_HD inline float uniform_from_bits(uint32_t x, UniformParams p) {
  const float v = fma_rn(uniform01(x), p.scale, p.lo);
  return v < p.top ? v : p.top;
}

// --- normal (Box-Muller) ----------------------------------------------------------------------

// ln(m * 2^-24) for an integer m in [1, 2^24], i.e. of a uniform in (0, 1]. The integer is split
// as 2^e * f with f in [sqrt(1/2), sqrt(2)); ln f = 2 atanh(s), s = (f-1)/(f+1), |s| <= 0.172,
// from its odd series to s^13 (truncation below 1e-12 relative). Absolute error ~1e-7.
KESTREL_HD inline float log_of_grid_uniform(uint32_t m) {
  const float fm = static_cast<float>(m);  // exact: m <= 2^24
  const uint32_t bits = float_bits(fm);
  int e = static_cast<int>(bits >> 23) - 127;
  float f = bits_float((bits & 0x007FFFFFu) | 0x3F800000u);  // mantissa in [1, 2)
  if (f > 1.41421356f) {
    f = f * 0.5f;  // exact
    e += 1;
  }
  const float s = div_rn(f - 1.0f, f + 1.0f);  // f - 1 and f + 1 are exact here
  const float s2 = s * s;
  float p = 1.0f / 13;
  p = fma_rn(p, s2, 1.0f / 11);
  p = fma_rn(p, s2, 1.0f / 9);
  p = fma_rn(p, s2, 1.0f / 7);
  p = fma_rn(p, s2, 1.0f / 5);
  p = fma_rn(p, s2, 1.0f / 3);
  p = fma_rn(p, s2, 1.0f);
  const float ln_f = 2.0f * s * p;
  // ln 2 split in a head exact in a few bits and a tail, so (e - 24) * ln2 loses nothing.
  const float k = static_cast<float>(e - 24);
  return fma_rn(k, 0.693145751953125f, fma_rn(k, 1.42860682030941723212e-6f, ln_f));
}

// sin and cos of 2*pi*j/2^24 for an integer j in [0, 2^24): the quadrant comes from the integer
// exactly, the remaining angle lies in [-pi/4, pi/4) where Taylor series to x^11 / x^12 are
// accurate to ~1e-9.
KESTREL_HD inline void sincos_of_grid_turn(uint32_t j, float* sin_out, float* cos_out) {
  const uint32_t quadrant = ((j + (1u << 21)) >> 22) & 3u;
  const int32_t r = static_cast<int32_t>(j - (((j + (1u << 21)) >> 22) << 22));  // [-2^21, 2^21)
  const float x = static_cast<float>(r) * 3.7450702829239286e-7f;  // 2*pi / 2^24
  const float x2 = x * x;
  float sp = -1.0f / 39916800;
  sp = fma_rn(sp, x2, 1.0f / 362880);
  sp = fma_rn(sp, x2, -1.0f / 5040);
  sp = fma_rn(sp, x2, 1.0f / 120);
  sp = fma_rn(sp, x2, -1.0f / 6);
  const float s = fma_rn(sp * x2, x, x);
  float cp = 1.0f / 479001600;
  cp = fma_rn(cp, x2, -1.0f / 3628800);
  cp = fma_rn(cp, x2, 1.0f / 40320);
  cp = fma_rn(cp, x2, -1.0f / 720);
  cp = fma_rn(cp, x2, 1.0f / 24);
  cp = fma_rn(cp, x2, -0.5f);
  const float c = fma_rn(cp, x2, 1.0f);
  switch (quadrant) {
    case 0: *sin_out = s; *cos_out = c; break;
    case 1: *sin_out = c; *cos_out = -s; break;
    case 2: *sin_out = -s; *cos_out = -c; break;
    default: *sin_out = -c; *cos_out = s; break;
  }
}

// Two independent standard normals from two 32-bit outputs: radius from a uniform in (0, 1] (never
// 0, so the log is finite; |z| <= 5.77), angle from a uniform turn.
KESTREL_HD inline void box_muller(uint32_t a, uint32_t b, float* z0, float* z1) {
  const float radius = sqrt_rn(-2.0f * log_of_grid_uniform((a >> 8) + 1u));
  float s, c;
  sincos_of_grid_turn(b >> 8, &s, &c);
  *z0 = radius * c;
  *z1 = radius * s;
}

// mean + std * z with one rounding.
KESTREL_HD inline float normal_from_standard(float z, float mean, float stddev) {
  return fma_rn(z, stddev, mean);
}

}  // namespace kestrel::philox
