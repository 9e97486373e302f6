#include "fuzz/targets.h"

namespace kestrel::fuzz {

void require(bool holds, const char* what) {
  if (!holds) throw PropertyViolation(what);
}

std::span<const Target> all_targets() {
  static constexpr Target kTargets[] = {
      {"label_lines", label_lines},   {"dataset_yaml", dataset_yaml},
      {"model_yaml", model_yaml},     {"safetensors", safetensors},
      {"label_cache", label_cache},   {"json", json},
      {"image_header", image_header}, {"cli_args", cli_args},
      {"zip_archive", zip_archive},   {"pickle", pickle},
      {"weights_file", weights_file},
  };
  return kTargets;
}

}  // namespace kestrel::fuzz
