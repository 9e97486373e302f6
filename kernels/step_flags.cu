#include "kernels/cuda_check.h"
#include "kernels/step_flags.h"

namespace kestrel::kernels {
namespace {

__global__ void step_flags_kernel(const double* components, float stop, float* flags) {
  flags[kFlagNonFinite] = loss_nonfinite(components);
  flags[kFlagStop] = stop;
}

}  // namespace

void step_flags_cuda(const double* components, bool stop, float* flags, cudaStream_t stream) {
  step_flags_kernel<<<1, 1, 0, stream>>>(components, stop ? 1.0f : 0.0f, flags);
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::kernels
