// --freeze: which parameters of a model stay as loaded.
#pragma once
#include <string>
#include <vector>

namespace kestrel::yolo {

// "model.<i>." prefixes of the frozen layers (one number N: the first N of the model's
// layer_count layers).
std::vector<std::string> freeze_prefixes(const std::vector<int>& freeze, int layer_count);

}  // namespace kestrel::yolo
