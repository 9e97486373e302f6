#include "kernels/step_flags.h"

namespace kestrel::kernels {

void step_flags_cpu(const double* components, const float* requests, float* flags) {
  compute_step_flags(components, requests, flags);
}

}  // namespace kestrel::kernels
