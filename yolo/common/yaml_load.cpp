#include "yolo/common/yaml_load.h"

#include <map>
#include <set>

#include "base/error.h"

namespace kestrel::yolo {
namespace {

// Each collection is walked once: an alias is the node it names (the same text position), and
// aliases of aliases would otherwise multiply the walk into the billions ("billion laughs").
void refuse_repeated_keys(const YAML::Node& node, const std::string& source, std::set<int>& walked) {
  if (!node.IsMap() && !node.IsSequence()) return;
  if (!walked.insert(node.Mark().pos).second) return;
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) refuse_repeated_keys(item, source, walked);
    return;
  }
  std::map<std::string, int> first_line;  // scalar key -> its 1-based line
  for (const auto& kv : node) {
    if (kv.first.IsScalar()) {
      const int line = kv.first.Mark().line + 1;
      const auto [at, inserted] = first_line.emplace(kv.first.Scalar(), line);
      KESTREL_CHECK(inserted, source, ": key '", kv.first.Scalar(), "' is given twice (lines ",
                    at->second, " and ", line, "); the reference's PyYAML would keep the last ",
                    "and yaml-cpp the first, so Kestrel refuses it: delete the one you do not mean");
    }
    refuse_repeated_keys(kv.second, source, walked);
  }
}

}  // namespace

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    KESTREL_FAIL(source, ": not valid YAML (", e.what(), ")");
  }
  std::set<int> walked;
  refuse_repeated_keys(root, source, walked);
  return root;
}

}  // namespace kestrel::yolo
