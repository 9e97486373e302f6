#include "kernels/bf16_operands.h"
#include "kernels/cast.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {

void cast_cpu(const void* src, DType st, void* dst, DType dt, int64_t n) {
  // The casts around the CPU's bfloat16 activations, vectorised: the same rounding as convert's.
  if (st == DType::F32 && dt == DType::BF16)
    return float_to_bf16_cpu(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  if (st == DType::BF16 && dt == DType::F32)
    return bf16_to_float_cpu(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  KESTREL_DISPATCH_ALL(st, S, KESTREL_DISPATCH_ALL(dt, D, {
    const S* s = static_cast<const S*>(src);
    D* d = static_cast<D*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = convert<D, S>(s[i]);
  }));
}

}  // namespace kestrel::kernels
