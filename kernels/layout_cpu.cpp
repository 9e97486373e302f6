#include "kernels/bf16_operands.h"
#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"
#include "kernels/layout.h"

namespace kestrel::kernels {
namespace {

// The CUDA kernel's tiling and element orders, with a local buffer for shared memory, so the
// tests of this reference check the indexing both versions share.
template <class U>
void transpose_typed(const U* src, U* dst, const TransposeShape& s) {
  const TransposeTiling t = transpose_tiling(s);
  U buffer[kTileCapacity];
  for (int64_t id = 0; id < t.count(s); ++id) {
    const TileSpan span = tile_span(s, t, id);
    const U* from = src + transpose_src(span.b, span.r0, span.c0, s.rows, s.cols);
    U* to = dst + transpose_dst(span.b, span.r0, span.c0, s.rows, s.cols);
    int r, c;
    for (int e = 0; e < span.rows * span.cols; ++e) {
      tile_load_element(span, e, r, c);
      buffer[r * t.pitch + c] = from[r * s.cols + c];
    }
    for (int e = 0; e < span.rows * span.cols; ++e) {
      tile_store_element(span, e, r, c);
      to[c * s.rows + r] = buffer[r * t.pitch + c];
    }
  }
}

}  // namespace

void transpose_batched_cpu(size_t elem_size, const void* src, void* dst, const TransposeShape& s) {
  if (s.batch * s.rows * s.cols == 0) return;
  switch (elem_size) {
    case 1: return transpose_typed(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), s);
    case 2:
      return transpose_typed(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), s);
    case 4:
      return transpose_typed(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), s);
    case 8:
      return transpose_typed(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), s);
  }
  KESTREL_FAIL("transpose_batched_cpu: element size ", elem_size, " is not 1, 2, 4 or 8 bytes");
}

namespace {

// dst[i] = table[src[i]]: a pixel's value depends on its byte alone, so float32 and bfloat16 look
// the 256 values up (the same values as computing each: scaled_pixel in double, then rounded), in
// chunks over OpenMP's threads.
template <class S>
void lookup_pixels(const uint8_t* src, const S* table, S* dst, int64_t n) {
  parallel_chunks(n, int64_t(1) << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = table[src[i]];
  });
}

}  // namespace

void images_to_input_cpu(const uint8_t* src, DType t, void* dst_, int64_t n, double scale) {
  if (t == DType::F32 || t == DType::BF16) {
    float f[256];
    for (int v = 0; v < 256; ++v) f[v] = scaled_pixel<float>(static_cast<uint8_t>(v), scale);
    if (t == DType::F32) return lookup_pixels(src, f, static_cast<float*>(dst_), n);
    uint16_t b[256];  // the CPU's bfloat16 activations: the float32 value, rounded once
    for (int v = 0; v < 256; ++v) b[v] = bf16_bits(f[v]);
    return lookup_pixels(src, b, static_cast<uint16_t*>(dst_), n);
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "images_to_input", {
    T* dst = static_cast<T*>(dst_);
    for (int64_t i = 0; i < n; ++i) dst[i] = scaled_pixel<T>(src[i], scale);
  });
}

}  // namespace kestrel::kernels
