// A dataset yaml is refused with kestrel::Error or read into a config the loader can use: at
// least one train and val source, absolute paths, one name per class.
#include <string>

#include "base/error.h"
#include "fuzz/targets.h"
#include "yolo/data/dataset_config.h"

namespace kestrel::fuzz {

void dataset_yaml(std::string_view input) {
  yolo::data::DatasetConfig cfg;
  try {
    // A folder that does not exist: relative entries resolve under it and no path is listed.
    cfg = yolo::data::parse_dataset_config(std::string(input), "/nonexistent/kestrel-fuzz/data.yaml");
  } catch (const Error&) {
    return;
  }
  require(!cfg.train.empty() && !cfg.val.empty(), "a config without train or val sources");
  require(cfg.nc >= 1 && static_cast<size_t>(cfg.nc) == cfg.names.size(), "nc and names disagree");
  for (const auto* split : {&cfg.train, &cfg.val, &cfg.test})
    for (const std::string& source : *split)
      require(!source.empty() && source.front() == '/', "a source that is not an absolute path");
  require(!cfg.root.empty() && cfg.root.front() == '/', "a root that is not an absolute path");
}

}  // namespace kestrel::fuzz
