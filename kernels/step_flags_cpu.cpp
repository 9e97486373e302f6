#include "kernels/step_flags.h"

namespace kestrel::kernels {

void step_flags_cpu(const double* components, const float* stop, float* flags) {
  flags[kFlagNonFinite] = loss_nonfinite(components);
  flags[kFlagStop] = *stop != 0.0f ? 1.0f : 0.0f;
}

}  // namespace kestrel::kernels
