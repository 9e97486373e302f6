// CPU fast-path helpers for the float32 kernels: runtime ISA dispatch, an exp that vectorises, and
// OpenMP chunking whose results do not depend on the thread count. CPU only (no CUDA includes it);
// the float64 paths keep the plain reference loops.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>

namespace kestrel::kernels {

// Compiles the function three times (AVX-512, AVX2 + FMA, baseline x86-64) and picks one at load
// time from the CPU it runs on (GCC function multiversioning, an ifunc), so the build needs no
// -march. Put it on a loop over plain arrays, written without branches, and let the compiler
// vectorise: the AVX-512 clone with 512-bit vectors, the AVX2 one with 256-bit vectors and FMA.
// The baseline (SSE2) clone vectorises plain arithmetic but keeps exp_approx's loops scalar (GCC
// does not if-convert its clamps there); it serves only CPUs from before 2013.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KESTREL_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KESTREL_CPU_CLONES
#endif

// exp(x) in float32 without a libm call, so that loops around it vectorise. Cephes' expf: x = n ln2
// + r with |r| <= ln2/2 (Cody-Waite: the high part of ln2 has 9 significant bits, so n * ln2_hi is
// exact), a degree-7 polynomial for e^r, then scaling by 2^n. Measured against exp in double over
// all normal results: at most 1.02 ulp (with or without FMA contraction). The scaling multiplies
// by 2^(n/2) twice, so results that overflow give +inf (x > 88.7228) and subnormal results
// (x < -87.34) come out right too (down to 0 below -103.97, as expf); NaN propagates.
inline float exp_approx(float x) {
  // Clamps written as selects that keep NaN (a comparison with NaN is false).
  const float lo = x < -104.0f ? -104.0f : x;
  const float xc = lo > 88.75f ? 88.75f : lo;
  // Round x / ln2 to the nearest integer n by adding 1.5 * 2^23: n lands in the low mantissa bits.
  constexpr float kRound = 12582912.0f;
  const float t = xc * 1.44269504088896341f + kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float nf = t - kRound;
  float r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // n in [-150, 128]: each half stays a normal exponent.
  const int32_t n1 = n >> 1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n - n1 + 127) << 23);
  return er * s1 * s2;
}

// The float32 fast paths' sigmoid and SiLU derivative: one formula wherever they are computed
// (the activations and the fused BN + SiLU), so that fused and unfused give the same bits.
inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }
// d silu / dz = s (1 + z (1 - s)), s = sigmoid(z).
inline float silu_grad_approx(float z) {
  const float s = sigmoid_approx(z);
  return s * (1.0f + z * (1.0f - s));
}

// Runs fn(begin, end) over [0, n) in chunks of `grain` items (the last one shorter), the chunks
// spread over OpenMP's threads (OMP_NUM_THREADS) when there are at least two. The chunk bounds do
// not depend on the thread count, so a kernel whose result depends only on them (per-element math,
// per-chunk partial sums merged in chunk order) gives the same bits on any number of threads.
// Choose grain large enough (tens of thousands of elements) that a chunk outweighs waking a thread:
// small tensors then run serially on the calling thread. Chunks are handed out dynamically: on a
// busy machine (data-loader threads, other processes) a thread that loses its core holds up one
// chunk, not a static half of the work.
template <class F>
void parallel_chunks(int64_t n, int64_t grain, F&& fn) {
  const int64_t chunks = n > 0 ? (n + grain - 1) / grain : 0;
#pragma omp parallel for schedule(dynamic) if (chunks > 1)
  for (int64_t k = 0; k < chunks; ++k) fn(k * grain, std::min(n, (k + 1) * grain));
}

}  // namespace kestrel::kernels
