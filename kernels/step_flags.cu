#include "kernels/cuda_check.h"
#include "kernels/step_flags.h"

namespace kestrel::kernels {
namespace {

__global__ void step_flags_kernel(const double* components, const float* stop, float* flags) {
  flags[kFlagNonFinite] = loss_nonfinite(components);
  flags[kFlagStop] = *stop != 0.0f ? 1.0f : 0.0f;
}

}  // namespace

void step_flags_cuda(const double* components, const float* stop, float* flags,
                     cudaStream_t stream) {
  step_flags_kernel<<<1, 1, 0, stream>>>(components, stop, flags);
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::kernels
