#include "base/openmp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace kestrel {

std::optional<std::string> openmp_spin_to_set(const char* wait_policy, const char* spin_count) {
  if (wait_policy || spin_count) return std::nullopt;
  return std::string(kSpinCount);
}

void settle_openmp_wait(char** argv) {
  const std::optional<std::string> spin =
      openmp_spin_to_set(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"));
  if (!spin || !argv || !argv[0]) return;
  if (setenv("GOMP_SPINCOUNT", spin->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Only reached when the exec failed (no /proc): leave the variable out, as libgomp never saw it.
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace kestrel
