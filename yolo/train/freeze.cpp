#include "yolo/train/freeze.h"

#include <algorithm>

namespace kestrel::yolo {

std::vector<std::string> freeze_prefixes(const std::vector<int>& freeze, int layer_count) {
  std::vector<int> layers = freeze;
  if (freeze.size() == 1) {
    layers.clear();
    // Layers past the model's last match nothing: --freeze 2000000000 must not list them all.
    for (int i = 0; i < std::min(freeze[0], layer_count); ++i) layers.push_back(i);
  }
  std::vector<std::string> out;
  for (int i : layers) out.push_back("model." + std::to_string(i) + ".");
  return out;
}

}  // namespace kestrel::yolo
