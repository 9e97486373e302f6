#include "kernels/cuda_check.h"
#include "kernels/step_flags.h"

namespace kestrel::kernels {
namespace {

__global__ void step_flags_kernel(const double* components, const float* requests,
                                  float* flags) {
  compute_step_flags(components, requests, flags);
}

}  // namespace

void step_flags_cuda(const double* components, const float* requests, float* flags,
                     cudaStream_t stream) {
  step_flags_kernel<<<1, 1, 0, stream>>>(components, requests, flags);
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::kernels
