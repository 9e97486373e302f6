// Element type conversion (dtype casts), CPU reference and CUDA.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace kestrel::kernels {

// One conversion rule for every device: through the wider of the two arithmetic types;
// float -> integer truncates toward zero, as static_cast does.
template <class D, class S>
KESTREL_HD inline D convert(S s) {
  return from_acc<D>(static_cast<acc_t<D>>(to_acc<S>(s)));
}

// dst[i] = convert(src[i]) for i in [0, n); both buffers contiguous.
void cast_cpu(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);
void cast_cuda(const void* src, DType src_type, void* dst, DType dst_type, int64_t n,
               cudaStream_t stream);

}  // namespace kestrel::kernels
