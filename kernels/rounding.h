// Correctly rounded float and double operations that host and device code share: on the device
// the _rn intrinsics, which nvcc never contracts into an FMA; on the host the plain operators
// (the build turns contraction off: -ffp-contract=off in CMakeLists.txt). CPU twins of CUDA
// kernels that tests compare bit for bit use these for every operation whose rounding matters.
#pragma once
#include <cmath>

#include "base/dtype.h"

namespace kestrel::kernels {

// Correctly rounded products and sums that the compiler may not contract into an FMA.
KESTREL_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KESTREL_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KESTREL_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
KESTREL_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

KESTREL_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KESTREL_HD inline double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
KESTREL_HD inline float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
KESTREL_HD inline double sqrt_rn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

}  // namespace kestrel::kernels
