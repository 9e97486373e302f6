// bfloat16 operands for the CPU's mixed precision (--amp bf16 on the CPU): float32 values rounded
// to bfloat16 (round to nearest, ties to even, as __float2bfloat16_rn), either stored as bfloat16
// for oneDNN's bf16 kernels or kept in float32 (the same values, for the emulation that checks the
// arithmetic on CPUs without bf16 instructions), and whether this CPU has those instructions.
#pragma once
#include <cstdint>
#include <cstring>

#include "base/dtype.h"

namespace kestrel::kernels {

// The bits of v rounded to bfloat16; a NaN stays a NaN (quiet, sign kept), infinities stay.
KESTREL_HD inline uint16_t bf16_bits(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (b >> 16) | 0x0040u;
  return static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// The float a bfloat16 value's bits stand for (exact).
KESTREL_HD inline float bf16_to_float(uint16_t bits) {
  const uint32_t b = static_cast<uint32_t>(bits) << 16;
  float r;
  memcpy(&r, &b, sizeof r);
  return r;
}

// v rounded to the nearest bfloat16 value, as a float.
KESTREL_HD inline float round_to_bf16(float v) { return bf16_to_float(bf16_bits(v)); }

// The CPU's activation storage types, for kernels written once over both: float32 itself, or
// bfloat16 as its raw bits (uint16_t). as_float reads a stored value exactly; stored_as<S> writes a
// float, rounding once (to nearest, ties to even) for bfloat16.
KESTREL_HD inline float as_float(float v) { return v; }
KESTREL_HD inline float as_float(uint16_t bits) { return bf16_to_float(bits); }
template <class S>
KESTREL_HD inline S stored_as(float v) {
  if constexpr (sizeof(S) == sizeof(uint16_t)) return bf16_bits(v);
  else return v;
}

// dst[i] = round_to_bf16(src[i]) (dst may be src); n contiguous values, OpenMP threads.
void round_to_bf16_cpu(const float* src, float* dst, int64_t n);
// dst[i] = bf16_bits(src[i]): the bfloat16 values themselves.
void float_to_bf16_cpu(const float* src, uint16_t* dst, int64_t n);
// dst[i] = bf16_to_float(src[i]) (exact).
void bf16_to_float_cpu(const uint16_t* src, float* dst, int64_t n);

// Whether this CPU runs bfloat16 arithmetic natively: AVX-512 BF16 or AMX-BF16, with the operating
// system saving their registers (XCR0), and oneDNN allowed to use them (its effective ISA, which
// ONEDNN_MAX_CPU_ISA may cap below bf16). What oneDNN's bf16 convolutions need; without it oneDNN
// offers no bf16 convolution at all on x86.
struct CpuBf16Support {
  bool avx512_bf16 = false, amx_bf16 = false;  // the CPU and the OS
  bool onednn_allows = false;                  // oneDNN's effective ISA includes avx512_core_bf16
  bool native() const { return (avx512_bf16 || amx_bf16) && onednn_allows; }
};
CpuBf16Support cpu_bf16_support();

}  // namespace kestrel::kernels
