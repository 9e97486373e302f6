#include "yolo/data/hsv_rgb.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <opencv2/imgproc.hpp>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu_simd.h"

namespace kestrel::yolo::data {
namespace {

constexpr int kHsvShift = 12;  // OpenCV's RGB2HSV_b fixed point
constexpr int kHueRange = 180;
constexpr float kHueScale = 6.0f / kHueRange;  // HSV2RGB_b's hscale, computed in float
constexpr float kInv255 = 1.0f / 255.0f;
constexpr int kBlock = 64;  // pixels a step; also the row-width multiple the fused path takes

// RGB2HSV_b's division tables: 255 * 2^12 / v and 180 * 2^12 / (6 diff), rounded half to even as
// saturate_cast<int>(double) does.
struct DivisionTables {
  int32_t sdiv[256], hdiv[256];
  DivisionTables() {
    sdiv[0] = hdiv[0] = 0;
    for (int i = 1; i < 256; ++i) {
      sdiv[i] = static_cast<int32_t>(std::nearbyint((255 << kHsvShift) / (1. * i)));
      hdiv[i] = static_cast<int32_t>(std::nearbyint((kHueRange << kHsvShift) / (6. * i)));
    }
  }
};

const DivisionTables& division_tables() {
  static const DivisionTables tables;  // immutable after its thread-safe construction
  return tables;
}

// Each gained 8-bit channel as HSV2RGB_b reads it: hue * 6/180, saturation and value / 255 (one
// float rounding each, as there).
struct ChannelFloats {
  float h[256], s[256], v[256];
  // For the AVX2 row, one gather a value instead of two: RGB2HSV_b's divisor for v in the low 20
  // bits, the gained v above them; and the saturation gain, applied as its table is made.
  int32_t v_sdiv[256];
  double s_gain;
};

ChannelFloats channel_floats(const std::array<std::array<uint8_t, 256>, 3>& t,
                             const std::array<double, 3>& r, const DivisionTables& dt) {
  ChannelFloats f;
  for (int x = 0; x < 256; ++x) {
    f.h[x] = static_cast<float>(t[0][x]) * kHueScale;
    f.s[x] = static_cast<float>(t[1][x]) * kInv255;
    f.v[x] = static_cast<float>(t[2][x]) * kInv255;
    // sdiv < 2^20; built unsigned, the top byte taken back with a logical shift.
    f.v_sdiv[x] = static_cast<int32_t>(static_cast<uint32_t>(dt.sdiv[x]) | uint32_t{t[2][x]} << 24);
  }
  f.s_gain = r[1];
  return f;
}

inline uint8_t saturate_u8(int x) { return static_cast<uint8_t>(x < 0 ? 0 : x > 255 ? 255 : x); }

// HSV2RGB_b's SIMD arithmetic on n <= kBlock pixels given as (h * 6/180, s / 255, v / 255), to
// planar R, G, B bytes. kFused: 1 - s f and 1 - s (1 - f) as one multiply-add each (what GCC makes
// of OpenCV's code where the target has FMA), else a product then a difference.
template <bool kFused>
[[gnu::always_inline]] inline void hsv_floats_to_rgb(const float* __restrict hf,
                                                     const float* __restrict sf,
                                                     const float* __restrict vf, int n,
                                                     uint8_t* __restrict r, uint8_t* __restrict g,
                                                     uint8_t* __restrict b) {
  for (int i = 0; i < n; ++i) {
    const float pre = static_cast<float>(static_cast<int>(hf[i]));  // the sector, 0..5
    const float f = hf[i] - pre, s = sf[i], v = vf[i];
    const float t0 = v, t1 = v * (1.0f - s);
    const float t2 = v * (kFused ? std::fma(-s, f, 1.0f) : 1.0f - s * f);
    const float t3 = v * (kFused ? std::fma(-s, 1.0f - f, 1.0f) : 1.0f - s * (1.0f - f));
    const int k = static_cast<int>(pre);
    // OpenCV's sector table {1,3,0}, {1,0,2}, {3,0,1}, {0,2,1}, {0,1,3}, {2,1,0} (B, G, R), as sums
    // of products by 0 or 1 (exact: every t is finite and >= 0), which vectorise where selects
    // chained this deep do not.
    const float k0 = k == 0, k1 = k == 1, k2 = k == 2, k3 = k == 3, k4 = k == 4, k5 = k >= 5;
    const float bb = t1 * (k0 + k1) + t3 * k2 + t0 * (k3 + k4) + t2 * k5;
    const float gg = t3 * k0 + t0 * (k1 + k2) + t2 * k3 + t1 * (k4 + k5);
    const float rr = t0 * (k0 + k5) + t2 * k1 + t1 * (k2 + k3) + t3 * k4;
    // * 255, truncated, saturated to 0..255 as its packs do.
    r[i] = saturate_u8(static_cast<int>(rr * 255.0f));
    g[i] = saturate_u8(static_cast<int>(gg * 255.0f));
    b[i] = saturate_u8(static_cast<int>(bb * 255.0f));
  }
}

KESTREL_CPU_CLONES void hsv_floats_to_rgb_fused(const float* hf, const float* sf, const float* vf,
                                                int n, uint8_t* r, uint8_t* g, uint8_t* b) {
  hsv_floats_to_rgb<true>(hf, sf, vf, n, r, g, b);
}
KESTREL_CPU_CLONES void hsv_floats_to_rgb_separate(const float* hf, const float* sf,
                                                   const float* vf, int n, uint8_t* r, uint8_t* g,
                                                   uint8_t* b) {
  hsv_floats_to_rgb<false>(hf, sf, vf, n, r, g, b);
}

// One row of n pixels (a multiple of kBlock), BGR in src to gained RGB in dst (may be src).
template <bool kFused>
[[gnu::always_inline]] inline void gained_row(const uint8_t* src, uint8_t* dst, int n,
                                              const ChannelFloats& cf, const DivisionTables& dt) {
  float hf[kBlock], sf[kBlock], vf[kBlock];
  uint8_t r[kBlock], g[kBlock], b[kBlock];
  for (int x0 = 0; x0 < n; x0 += kBlock) {
    const uint8_t* p = src + 3 * x0;
    for (int i = 0; i < kBlock; ++i) {
      // RGB2HSV_b, integer.
      const int bl = p[3 * i], gr = p[3 * i + 1], rd = p[3 * i + 2];
      const int v = std::max(bl, std::max(gr, rd));
      const int diff = v - std::min(bl, std::min(gr, rd));
      const int s = std::min((diff * dt.sdiv[v] + (1 << (kHsvShift - 1))) >> kHsvShift, 255);
      const int h0 = v == rd ? gr - bl : v == gr ? bl - rd + 2 * diff : rd - gr + 4 * diff;
      int h = (h0 * dt.hdiv[diff] + (1 << (kHsvShift - 1))) >> kHsvShift;
      h += h < 0 ? kHueRange : 0;
      h = std::clamp(h, 0, 255);  // saturate_cast<uchar>; h stays in 0..179
      hf[i] = cf.h[h], sf[i] = cf.s[s], vf[i] = cf.v[v];
    }
    // Through the dispatched function, not inlined here: with the block's constant length GCC
    // unrolls this loop completely and no longer vectorises it.
    (kFused ? hsv_floats_to_rgb_fused : hsv_floats_to_rgb_separate)(hf, sf, vf, kBlock, r, g, b);
    uint8_t* q = dst + 3 * x0;
    for (int i = 0; i < kBlock; ++i) q[3 * i] = r[i], q[3 * i + 1] = g[i], q[3 * i + 2] = b[i];
  }
}

KESTREL_CPU_CLONES void gained_row_fused(const uint8_t* src, uint8_t* dst, int n,
                                         const ChannelFloats& cf, const DivisionTables& dt) {
  gained_row<true>(src, dst, n, cf, dt);
}
KESTREL_CPU_CLONES void gained_row_separate(const uint8_t* src, uint8_t* dst, int n,
                                            const ChannelFloats& cf, const DivisionTables& dt) {
  gained_row<false>(src, dst, n, cf, dt);
}

#if defined(__x86_64__)
// The same row with AVX2 (+ FMA, which every AVX2 CPU has), 8 pixels a step; chosen at run time.
// Integer HSV as RGB2HSV_b in 32-bit lanes, the tables read with gathers, HSV2RGB_b's float steps
// with its sector selection as blends. Reads and writes stay inside each 8-pixel group's 24 bytes,
// so src == dst is fine.
template <bool kFused>
__attribute__((target("avx2,fma"))) void gained_row_avx2(const uint8_t* src, uint8_t* dst, int n,
                                                         const ChannelFloats& cf,
                                                         const DivisionTables& dt) {
  // Bytes of pixels 0-3 (lane 0, from src + 0) and 4-7 (lane 1, from src + 8, so at offset 4).
  const __m256i pick_b =
      _mm256_setr_epi8(0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1, -1, -1, 4, -1, -1, -1, 7,
                       -1, -1, -1, 10, -1, -1, -1, 13, -1, -1, -1);
  const __m256i pick_g = _mm256_add_epi8(
      pick_b,
      _mm256_and_si256(_mm256_cmpgt_epi8(pick_b, _mm256_set1_epi8(-1)), _mm256_set1_epi8(1)));
  const __m256i pick_r = _mm256_add_epi8(
      pick_g,
      _mm256_and_si256(_mm256_cmpgt_epi8(pick_g, _mm256_set1_epi8(-1)), _mm256_set1_epi8(1)));
  // R | G << 8 | B << 16 per 32-bit lane to 12 packed bytes a 128-bit lane, then 24 contiguous.
  const __m256i pack = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0,
                                        1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i gather_24 = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
  const __m256i half = _mm256_set1_epi32(1 << (kHsvShift - 1)), zero = _mm256_setzero_si256();
  const __m256i i255 = _mm256_set1_epi32(255), hue_range = _mm256_set1_epi32(kHueRange);
  const __m256 one = _mm256_set1_ps(1.0f), f255 = _mm256_set1_ps(255.0f),
               inv255 = _mm256_set1_ps(kInv255);
  const __m256d s_gain = _mm256_set1_pd(cf.s_gain), zero_d = _mm256_setzero_pd(),
                max_d = _mm256_set1_pd(255.0);
  const __m256i k1 = _mm256_set1_epi32(1), k2 = _mm256_set1_epi32(2), k3 = _mm256_set1_epi32(3),
                k4 = _mm256_set1_epi32(4), k5 = _mm256_set1_epi32(5);
  for (int x = 0; x < n; x += 8) {
    const uint8_t* p = src + 3 * x;
    const __m256i bytes = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)), 1);
    const __m256i b = _mm256_shuffle_epi8(bytes, pick_b), g = _mm256_shuffle_epi8(bytes, pick_g),
                  r = _mm256_shuffle_epi8(bytes, pick_r);
    // RGB2HSV_b.
    const __m256i v = _mm256_max_epi32(b, _mm256_max_epi32(g, r));
    const __m256i diff = _mm256_sub_epi32(v, _mm256_min_epi32(b, _mm256_min_epi32(g, r)));
    const __m256i v_sdiv = _mm256_i32gather_epi32(cf.v_sdiv, v, 4);
    const __m256i sdiv = _mm256_and_si256(v_sdiv, _mm256_set1_epi32((1 << 20) - 1));
    const __m256i s = _mm256_min_epi32(
        _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(diff, sdiv), half), kHsvShift), i255);
    const __m256i vr = _mm256_cmpeq_epi32(v, r), vg = _mm256_cmpeq_epi32(v, g);
    const __m256i h_r = _mm256_sub_epi32(g, b);
    const __m256i h_g = _mm256_add_epi32(_mm256_sub_epi32(b, r), _mm256_slli_epi32(diff, 1));
    const __m256i h_b = _mm256_add_epi32(_mm256_sub_epi32(r, g), _mm256_slli_epi32(diff, 2));
    const __m256i h0 = _mm256_blendv_epi8(_mm256_blendv_epi8(h_b, h_g, vg), h_r, vr);
    const __m256i hdiv = _mm256_i32gather_epi32(dt.hdiv, diff, 4);
    __m256i h = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(h0, hdiv), half), kHsvShift);
    h = _mm256_add_epi32(h, _mm256_and_si256(_mm256_cmpgt_epi32(zero, h), hue_range));
    h = _mm256_min_epi32(_mm256_max_epi32(h, zero), i255);
    // The gained channels as HSV2RGB_b reads them, then its float steps.
    const __m256 hf = _mm256_i32gather_ps(cf.h, h, 4);
    // The gained s as hsv_gain_tables makes it: the product in double, clipped, truncated.
    const __m256d s_lo = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(s)), s_gain);
    const __m256d s_hi = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(s, 1)), s_gain);
    const __m256i s_gained = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(s_lo, zero_d), max_d))),
        _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(s_hi, zero_d), max_d)), 1);
    const __m256 sf = _mm256_mul_ps(_mm256_cvtepi32_ps(s_gained), inv255);
    const __m256 vf = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v_sdiv, 24)), inv255);
    const __m256i k = _mm256_cvttps_epi32(hf);
    const __m256 f = _mm256_sub_ps(hf, _mm256_cvtepi32_ps(k));
    const __m256 t0 = vf, t1 = _mm256_mul_ps(vf, _mm256_sub_ps(one, sf));
    const __m256 f1 = _mm256_sub_ps(one, f);
    const __m256 t2 = _mm256_mul_ps(
        vf, kFused ? _mm256_fnmadd_ps(sf, f, one) : _mm256_sub_ps(one, _mm256_mul_ps(sf, f)));
    const __m256 t3 = _mm256_mul_ps(
        vf, kFused ? _mm256_fnmadd_ps(sf, f1, one) : _mm256_sub_ps(one, _mm256_mul_ps(sf, f1)));
    const __m256 lt1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k1, k));
    const __m256 lt2 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k2, k));
    const __m256 lt3 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k3, k));
    const __m256 lt4 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k4, k));
    const __m256 lt5 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(k5, k));
    // Sectors 0-5: B = t1 t1 t3 t0 t0 t2, G = t3 t0 t0 t2 t1 t1, R = t0 t2 t1 t1 t3 t0.
    __m256 bb = _mm256_blendv_ps(t2, t0, lt5);
    bb = _mm256_blendv_ps(bb, t3, lt3);
    bb = _mm256_blendv_ps(bb, t1, lt2);
    __m256 gg = _mm256_blendv_ps(t1, t2, lt4);
    gg = _mm256_blendv_ps(gg, t0, lt3);
    gg = _mm256_blendv_ps(gg, t3, lt1);
    __m256 rr = _mm256_blendv_ps(t0, t3, lt5);
    rr = _mm256_blendv_ps(rr, t1, lt4);
    rr = _mm256_blendv_ps(rr, t2, lt2);
    rr = _mm256_blendv_ps(rr, t0, lt1);
    // * 255 truncated, saturated to 0..255 as OpenCV's packs do.
    const __m256i ri = _mm256_min_epi32(
        _mm256_max_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(rr, f255)), zero), i255);
    const __m256i gi = _mm256_min_epi32(
        _mm256_max_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(gg, f255)), zero), i255);
    const __m256i bi = _mm256_min_epi32(
        _mm256_max_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(bb, f255)), zero), i255);
    const __m256i rgb =
        _mm256_or_si256(ri, _mm256_or_si256(_mm256_slli_epi32(gi, 8), _mm256_slli_epi32(bi, 16)));
    const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(rgb, pack), gather_24);
    uint8_t* q = dst + 3 * x;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm256_castsi256_si128(packed));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 16), _mm256_extracti128_si256(packed, 1));
  }
}
#endif

enum class Rounding { kNone, kSeparate, kFused };

// Which of the two roundings reproduces cv::cvtColor(HSV2RGB) for every 8-bit (h, s, v), h < 180:
// one 256 x 256 image (s by v) a hue, 11.8 M pixels in all, once a process.
Rounding calibrate() {
  cv::Mat hsv(256, 256, CV_8UC3), rgb;
  bool ok[2] = {true, true};  // separate, fused
  float hf[kBlock], sf[kBlock], vf[kBlock];
  uint8_t r[kBlock], g[kBlock], b[kBlock];
  for (int h = 0; h < kHueRange && (ok[0] || ok[1]); ++h) {
    for (int s = 0; s < 256; ++s) {
      uint8_t* p = hsv.ptr<uint8_t>(s);
      for (int v = 0; v < 256; ++v)
        p[3 * v] = static_cast<uint8_t>(h), p[3 * v + 1] = static_cast<uint8_t>(s),
              p[3 * v + 2] = static_cast<uint8_t>(v);
    }
    cv::cvtColor(hsv, rgb, cv::COLOR_HSV2RGB);
    for (int s = 0; s < 256; ++s) {
      const uint8_t* want = rgb.ptr<uint8_t>(s);
      for (int v0 = 0; v0 < 256; v0 += kBlock) {
        for (int i = 0; i < kBlock; ++i) {
          hf[i] = static_cast<float>(h) * kHueScale;
          sf[i] = static_cast<float>(s) * kInv255;
          vf[i] = static_cast<float>(v0 + i) * kInv255;
        }
        for (int k = 0; k < 2; ++k) {
          if (!ok[k]) continue;
          (k ? hsv_floats_to_rgb_fused : hsv_floats_to_rgb_separate)(hf, sf, vf, kBlock, r, g, b);
          for (int i = 0; i < kBlock && ok[k]; ++i) {
            const uint8_t* w = want + 3 * (v0 + i);
            ok[k] = w[0] == r[i] && w[1] == g[i] && w[2] == b[i];
          }
        }
      }
    }
  }
  return ok[1] ? Rounding::kFused : ok[0] ? Rounding::kSeparate : Rounding::kNone;
}

Rounding machine_rounding() {
  static const Rounding rounding = calibrate();  // immutable after its thread-safe construction
  return rounding;
}

}  // namespace

std::array<std::array<uint8_t, 256>, 3> hsv_gain_tables(const std::array<double, 3>& r) {
  std::array<std::array<uint8_t, 256>, 3> t;
  for (int x = 0; x < 256; ++x) {
    double hue = std::fmod(x * r[0], 180.0);
    if (hue < 0) hue += 180.0;
    t[0][x] = static_cast<uint8_t>(hue);
    t[1][x] = static_cast<uint8_t>(std::clamp(x * r[1], 0.0, 255.0));
    t[2][x] = static_cast<uint8_t>(std::clamp(x * r[2], 0.0, 255.0));
  }
  return t;
}

bool fused_hsv_available() { return machine_rounding() != Rounding::kNone; }

bool fused_hsv_gains_to_rgb(cv::Mat& image, const std::array<double, 3>& r, bool portable) {
  if (image.type() != CV_8UC3 || image.cols % kBlock != 0) return false;
  const Rounding rounding = machine_rounding();
  if (rounding == Rounding::kNone) return false;
  const DivisionTables& dt = division_tables();
  const ChannelFloats cf = channel_floats(hsv_gain_tables(r), r, dt);
  auto* row = rounding == Rounding::kFused ? gained_row_fused : gained_row_separate;
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && !portable)
    row = rounding == Rounding::kFused ? gained_row_avx2<true> : gained_row_avx2<false>;
#endif
  for (int y = 0; y < image.rows; ++y) {
    uint8_t* p = image.ptr<uint8_t>(y);
    row(p, p, image.cols, cf, dt);
  }
  return true;
}

}  // namespace kestrel::yolo::data
