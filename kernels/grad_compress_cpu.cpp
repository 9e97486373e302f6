#include "kernels/error.h"
#include "kernels/grad_compress.h"

namespace kestrel::kernels {
namespace {

template <class H>
void compress(const float* src, void* dst, int64_t n, int world) {
  H* d = static_cast<H*>(dst);
  const float w = static_cast<float>(world);
  for (int64_t i = 0; i < n; ++i) d[i] = compress_grad<H>(src[i], w);
}

template <class H>
void decompress(const void* src, float* dst, int64_t n) {
  const H* s = static_cast<const H*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = decompress_grad<H>(s[i]);
}

}  // namespace

void grad_compress_cpu(const float* src, void* dst, DType half, int64_t n, int world) {
  KESTREL_CHECK(world >= 1, "grad_compress: the world size must be at least 1, got ", world);
  if (half == DType::F16) return compress<f16>(src, dst, n, world);
  KESTREL_CHECK(half == DType::BF16, "grad_compress: compresses to f16 or bf16, not ",
                dtype_name(half));
  compress<bf16>(src, dst, n, world);
}

void grad_decompress_cpu(const void* src, DType half, float* dst, int64_t n) {
  if (half == DType::F16) return decompress<f16>(src, dst, n);
  KESTREL_CHECK(half == DType::BF16, "grad_decompress: decompresses f16 or bf16, not ",
                dtype_name(half));
  decompress<bf16>(src, dst, n);
}

}  // namespace kestrel::kernels
