#include "kernels/detect.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {

void detect_decode_cpu(DType t, const void* raw_, void* out_, const DetectLevelShape& s,
                       const float* anchors_px) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "detect decode", {
    const T* raw = static_cast<const T*>(raw_);
    T* out = static_cast<T*>(out_);
    for (int64_t i = 0; i < s.numel(); ++i) out[i] = decode_element(raw[i], i, s, anchors_px);
  });
}

}  // namespace kestrel::kernels
