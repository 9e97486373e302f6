#include "kernels/step_flags.h"

namespace kestrel::kernels {

void step_flags_cpu(const double* components, bool stop, float* flags) {
  flags[kFlagNonFinite] = loss_nonfinite(components);
  flags[kFlagStop] = stop ? 1.0f : 0.0f;
}

}  // namespace kestrel::kernels
