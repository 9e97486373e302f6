#include "kernels/cast.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {

void cast_cpu(const void* src, DType st, void* dst, DType dt, int64_t n) {
  KESTREL_DISPATCH_ALL(st, S, KESTREL_DISPATCH_ALL(dt, D, {
    const S* s = static_cast<const S*>(src);
    D* d = static_cast<D*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = convert<D, S>(s[i]);
  }));
}

}  // namespace kestrel::kernels
