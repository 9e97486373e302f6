#include "base/error.h"
#include "kernels/grad_compress.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {
namespace {

template <class H>
void compress(const float* src, void* dst, int64_t n, int world, cudaStream_t stream) {
  H* d = static_cast<H*>(dst);
  const float w = static_cast<float>(world);
  cuda::launch_map(n, stream, [=] __device__(int64_t i) { d[i] = compress_grad<H>(src[i], w); });
}

template <class H>
void decompress(const void* src, float* dst, int64_t n, cudaStream_t stream) {
  const H* s = static_cast<const H*>(src);
  cuda::launch_map(n, stream, [=] __device__(int64_t i) { dst[i] = decompress_grad<H>(s[i]); });
}

}  // namespace

void grad_compress_cuda(const float* src, void* dst, DType half, int64_t n, int world,
                        cudaStream_t stream) {
  KESTREL_CHECK(world >= 1, "grad_compress: the world size must be at least 1, got ", world);
  if (half == DType::F16) return compress<f16>(src, dst, n, world, stream);
  KESTREL_CHECK(half == DType::BF16, "grad_compress: compresses to f16 or bf16, not ",
                dtype_name(half));
  compress<bf16>(src, dst, n, world, stream);
}

void grad_decompress_cuda(const void* src, DType half, float* dst, int64_t n,
                          cudaStream_t stream) {
  if (half == DType::F16) return decompress<f16>(src, dst, n, stream);
  KESTREL_CHECK(half == DType::BF16, "grad_decompress: decompresses f16 or bf16, not ",
                dtype_name(half));
  decompress<bf16>(src, dst, n, stream);
}

}  // namespace kestrel::kernels
