#include "kernels/cast.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {

void cast_cuda(const void* src, DType st, void* dst, DType dt, int64_t n, cudaStream_t stream) {
  KESTREL_DISPATCH_ALL(st, S, KESTREL_DISPATCH_ALL(dt, D, {
    const S* s = static_cast<const S*>(src);
    D* d = static_cast<D*>(dst);
    cuda::launch_map(n, stream, [=] __device__(int64_t i) { d[i] = convert<D, S>(s[i]); });
  }));
}

}  // namespace kestrel::kernels
