// The one way Kestrel reads the reference's yaml files (model, dataset, hyperparameters).
// yaml-cpp keeps every copy of a repeated key and a lookup finds the first, while PyYAML, which
// the reference reads them with, keeps the last: the same file would train differently. A
// repeated key is therefore refused, naming it and both lines, so the user decides which holds.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>

namespace kestrel::yolo {

// Parses `text`; throws kestrel::Error naming `source` when it is not valid YAML or when any
// mapping, at any depth, repeats a key.
YAML::Node load_yaml(const std::string& text, const std::string& source);

}  // namespace kestrel::yolo
