// Decoding of the Detect head's raw outputs into boxes (the reference v7.0's inference path):
// xy = (2·σ(t) − 0.5 + cell)·stride, wh = (2·σ(t))²·anchor_px, confidence and classes = σ(t).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"
#include "kernels/elementwise.h"

namespace kestrel::kernels {

// One level's raw output, contiguous (batch, na, ny, nx, no).
struct DetectLevelShape {
  int64_t batch, na, ny, nx, no;
  double stride;
  KESTREL_HD int64_t numel() const { return batch * na * ny * nx * no; }
};

// Element i of the level (row-major over batch, a, y, x, o); anchors_px holds na (w, h) pairs.
template <class T>
KESTREL_HD inline T decode_element(T raw, int64_t i, const DetectLevelShape& s,
                                   const float* anchors_px) {
  const int64_t o = i % s.no;
  const int64_t x = (i / s.no) % s.nx;
  const int64_t y = (i / (s.no * s.nx)) % s.ny;
  const int64_t a = (i / (s.no * s.nx * s.ny)) % s.na;
  const T sig = sigmoid_fn(raw);
  const T stride = static_cast<T>(s.stride);
  switch (o) {
    case 0: return (sig * T(2) + static_cast<T>(x) - T(0.5)) * stride;
    case 1: return (sig * T(2) + static_cast<T>(y) - T(0.5)) * stride;
    case 2: return (sig * T(2)) * (sig * T(2)) * static_cast<T>(anchors_px[2 * a]);
    case 3: return (sig * T(2)) * (sig * T(2)) * static_cast<T>(anchors_px[2 * a + 1]);
    default: return sig;
  }
}

// out[i] = decode_element(raw[i]); anchors_px is host memory for the CPU version and device
// memory for the CUDA one.
void detect_decode_cpu(DType t, const void* raw, void* out, const DetectLevelShape& shape,
                       const float* anchors_px);
void detect_decode_cuda(DType t, const void* raw, void* out, const DetectLevelShape& shape,
                        const float* anchors_px, cudaStream_t stream);

}  // namespace kestrel::kernels
