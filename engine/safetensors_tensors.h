// Tensors in and out of safetensors files: the format itself (header, checks, bytes) is
// io/safetensors.h, which knows no tensors; this is the one place that turns its entries into
// tensors and tensors into its records.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "io/safetensors.h"

namespace kestrel {

// Writes `tensors` (any device, any strides; copied to contiguous host data one at a time, as the
// file is written) to `path` through write_safetensors: sorted by name, atomic.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A new tensor on `device` with the values `file` stores under `name`. Dtypes the format defines
// but Kestrel has no tensor type for are refused, naming the dtype.
Tensor safetensors_tensor(const SafetensorsFile& file, const std::string& name,
                          Device device = Device::cpu());

}  // namespace kestrel
