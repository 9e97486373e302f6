#include "kernels/detect.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {

void detect_decode_cuda(DType t, const void* raw_, void* out_, const DetectLevelShape& s,
                        const float* anchors_px, cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "detect decode", {
    const T* raw = static_cast<const T*>(raw_);
    T* out = static_cast<T*>(out_);
    cuda::launch_map(s.numel(), stream, [=] __device__(int64_t i) {
      out[i] = from_acc<T>(decode_element(to_acc(raw[i]), i, s, anchors_px));
    });
  });
}

}  // namespace kestrel::kernels
