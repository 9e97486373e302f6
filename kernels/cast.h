// Element type conversion (dtype casts), CPU reference and CUDA.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "base/dtype.h"

namespace kestrel::kernels {

// One conversion rule for every device: through the wider of the two arithmetic types, rounding
// once (double and 64-bit integers go to the half types directly from double, not via float);
// float -> integer truncates toward zero, as static_cast does.
template <class D, class S>
KESTREL_HD inline D convert(S s) {
  constexpr bool wide_source = std::is_same_v<S, double> || std::is_same_v<S, int64_t> ||
                               std::is_same_v<S, int32_t>;
  if constexpr (wide_source && std::is_same_v<D, f16>) {
    return __double2half(static_cast<double>(s));
  } else if constexpr (wide_source && std::is_same_v<D, bf16>) {
    return __double2bfloat16(static_cast<double>(s));
  } else {
    return from_acc<D>(static_cast<acc_t<D>>(to_acc<S>(s)));
  }
}

// dst[i] = convert(src[i]) for i in [0, n); both buffers contiguous.
void cast_cpu(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);
void cast_cuda(const void* src, DType src_type, void* dst, DType dst_type, int64_t n,
               cudaStream_t stream);

}  // namespace kestrel::kernels
