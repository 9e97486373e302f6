#include "kernels/bf16_operands.h"

#include <algorithm>

#include "kernels/cpu_simd.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <dnnl.hpp>

namespace kestrel::kernels {

namespace {

// Plain loops over the shared per-value rounding, which GCC vectorises (integer adds, shifts and a
// blend for NaNs) in each clone: AVX-512 and AVX2 where the CPU has them (the build targets
// baseline x86-64). Memory bound.
KESTREL_CPU_CLONES void round_range(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

KESTREL_CPU_CLONES void bits_range(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i]);
}

KESTREL_CPU_CLONES void widen_range(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

constexpr int64_t kChunk = int64_t(1) << 15;

}  // namespace

void round_to_bf16_cpu(const float* src, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 2 * kChunk)
  for (int64_t b = 0; b < n; b += kChunk) round_range(src + b, dst + b, std::min(kChunk, n - b));
}

void float_to_bf16_cpu(const float* src, uint16_t* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 2 * kChunk)
  for (int64_t b = 0; b < n; b += kChunk) bits_range(src + b, dst + b, std::min(kChunk, n - b));
}

void bf16_to_float_cpu(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 2 * kChunk)
  for (int64_t b = 0; b < n; b += kChunk) widen_range(src + b, dst + b, std::min(kChunk, n - b));
}

CpuBf16Support cpu_bf16_support() {
  CpuBf16Support s;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return s;  // OSXSAVE: xgetbv works
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  asm volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const uint64_t xcr0 = (uint64_t(xcr0_hi) << 32) | xcr0_lo;
  const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;            // SSE, AVX, opmask, ZMM upper halves, ZMM16-31
  const bool tiles_saved = (xcr0 & 0x60000) == 0x60000;    // XTILECFG, XTILEDATA
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return s;
  const bool avx512f = b & (1u << 16), amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool avx512_bf16 = __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5));
  s.avx512_bf16 = zmm_saved && avx512f && avx512_bf16;
  s.amx_bf16 = tiles_saved && amx_tile && amx_bf16;
  // oneDNN's ISAs are bit sets, each including the ones below it (AMX and avx512_core_fp16
  // include avx512_core_bf16).
  const auto bf16_isa = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  s.onednn_allows = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bf16_isa) == bf16_isa;
#endif
  return s;
}

}  // namespace kestrel::kernels
