// A model yaml is refused with kestrel::Error or parsed into rows the builder can walk: every
// `from` names an earlier layer, the last row is Detect, anchors come in w,h pairs of equal count.
#include <string>

#include "base/error.h"
#include "fuzz/targets.h"
#include "yolo/model/model_config.h"

namespace kestrel::fuzz {

void model_yaml(std::string_view input) {
  yolo::ModelConfig cfg;
  try {
    cfg = yolo::parse_model_config(std::string(input), "fuzz.yaml");
  } catch (const Error&) {
    return;
  }
  require(cfg.nc >= 1 && cfg.input_channels >= 1 && cfg.anchors_per_level >= 1,
          "a count below 1 accepted");
  require(!cfg.rows.empty() && cfg.rows.back().module == "Detect", "the last row is no Detect");
  for (size_t layer = 0; layer < cfg.rows.size(); ++layer) {
    const yolo::LayerRow& row = cfg.rows[layer];
    require(row.number >= 1 && !row.from.empty(), "a row without repeats or inputs");
    for (const int f : row.from) {
      const int64_t target = f < 0 ? static_cast<int64_t>(layer) + f : f;
      require((target >= 0 && target < static_cast<int64_t>(layer)) || (layer == 0 && f == -1),
              "`from` names no earlier layer");
    }
  }
  for (const auto& level : cfg.anchors)
    require(level.size() == 2 * static_cast<size_t>(cfg.anchors_per_level),
            "anchor levels of different sizes");
}

}  // namespace kestrel::fuzz
