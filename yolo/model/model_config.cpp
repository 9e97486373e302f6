#include "yolo/model/model_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "yolo/common/yaml_load.h"

namespace kestrel::yolo {
namespace {

// Bounds far beyond every official model (yolov5x6: 12 repeats, 1280 channels, multiples 1.33
// and 1.25), so that a typo such as `depth_multiple: 133` is refused here rather than building
// a model no machine can hold.
constexpr double kMaxMultiple = 4.0;
constexpr int64_t kMaxRepeats = 64;
constexpr int64_t kMaxChannels = 8192;
// The Detect head has anchors x (nc + 5) outputs per level: a few anchors and at most as many
// classes as a dataset yaml may declare.
constexpr int kMaxAnchors = 64;
constexpr int kMaxClasses = 100'000;

// The builder's scaling (yolo/model/model.cpp, as the reference's parse_model): repeats round half to
// even, channels round up to a multiple of 8 (in double: any int64 argument stays defined).
int64_t scaled_repeats(int number, double gd) {
  return number > 1 ? std::max<int64_t>(static_cast<int64_t>(std::nearbyint(number * gd)), 1) : number;
}
double scaled_channels(int64_t c2, double gw) {
  return std::ceil(static_cast<double>(c2) * gw / 8.0) * 8;
}

// Repeats and output channels of a row after the multiples, within the bounds above.
void check_size(const LayerRow& r, const ModelConfig& cfg) {
  const int64_t repeats = scaled_repeats(r.number, cfg.depth_multiple);
  KESTREL_CHECK(repeats <= kMaxRepeats, r.where, ": `number` ", r.number, " gives ", repeats,
                " repeats at depth_multiple ", cfg.depth_multiple, "; at most ", kMaxRepeats,
                " are supported (yolov5x uses 12): check the yaml");
  // These modules take their output channels as the first argument.
  const bool has_c2 = r.module == "Conv" || r.module == "C3" || r.module == "Bottleneck" ||
                      r.module == "SPPF";
  if (!has_c2 || r.args.empty()) return;
  const int64_t c2 = r.args[0].as_int(r.where);
  KESTREL_CHECK(c2 >= 1, r.where, ": output channels must be at least 1, got ", c2);
  const double channels = scaled_channels(c2, cfg.width_multiple);
  KESTREL_CHECK(channels <= kMaxChannels, r.where, ": ", c2,
                " output channels give ", channels, " at width_multiple ", cfg.width_multiple,
                "; at most ", kMaxChannels, " are supported (yolov5x uses 1280): check the yaml");
}

ConfigArg to_arg(const YAML::Node& node, const std::string& where) {
  ConfigArg a;
  if (node.IsSequence()) {
    a.is_list = true;
    for (const auto& item : node) a.items.push_back(to_arg(item, where));
  } else if (node.IsScalar()) {
    a.text = node.Scalar();
  } else if (node.IsNull()) {
    a.text = "None";
  } else {
    KESTREL_FAIL(where, ": arguments must be scalars or lists");
  }
  return a;
}

std::vector<int> parse_from(const YAML::Node& node, const std::string& where, bool& is_list) {
  std::vector<int> from;
  is_list = node.IsSequence();
  try {
    if (is_list) {
      for (const auto& v : node) from.push_back(v.as<int>());
    } else {
      from.push_back(node.as<int>());
    }
  } catch (const YAML::Exception&) {
    KESTREL_FAIL(where, ": `from` must be an integer or a list of integers");
  }
  KESTREL_CHECK(!from.empty(), where, ": `from` is an empty list");
  return from;
}

void parse_rows(const YAML::Node& section, const char* section_name, const std::string& source,
                ModelConfig& cfg) {
  KESTREL_CHECK(section && section.IsSequence(), source, ": `", section_name,
                "` must be a list of [from, number, module, args] rows");
  int row_index = 0;
  for (const auto& row : section) {
    const int layer = static_cast<int>(cfg.rows.size());
    LayerRow r;
    r.where = str(source, ", ", section_name, " row ", row_index++, " (layer ", layer, ")");
    KESTREL_CHECK(row.IsSequence() && row.size() == 4, r.where,
                  ": expected [from, number, module, args]");
    r.from = parse_from(row[0], r.where, r.from_is_list);
    try {
      r.number = row[1].as<int>();
      r.module = row[2].as<std::string>();
    } catch (const YAML::Exception&) {
      KESTREL_FAIL(r.where, ": `number` must be an integer and `module` a name");
    }
    KESTREL_CHECK(r.number >= 1, r.where, ": `number` must be at least 1, got ", r.number);
    KESTREL_CHECK(row[3].IsSequence(), r.where, ": `args` must be a list");
    for (const auto& a : row[3]) r.args.push_back(to_arg(a, r.where));
    check_size(r, cfg);
    for (int f : r.from) {
      const int target = f < 0 ? layer + f : f;
      KESTREL_CHECK((target >= 0 && target < layer) || (layer == 0 && f == -1), r.where,
                    ": `from` ", f, " does not name an earlier layer");
    }
    cfg.rows.push_back(std::move(r));
  }
}

template <class T>
T required(const YAML::Node& root, const char* key, const std::string& source) {
  KESTREL_CHECK(root[key], source, ": missing `", key, "`");
  try {
    return root[key].as<T>();
  } catch (const YAML::Exception&) {
    KESTREL_FAIL(source, ": `", key, "` has the wrong type");
  }
}

}  // namespace

int64_t ConfigArg::as_int(const std::string& where) const {
  try {
    KESTREL_CHECK(!is_list, "");
    size_t used = 0;
    int64_t v = std::stoll(text, &used);
    KESTREL_CHECK(used == text.size(), "");
    return v;
  } catch (const std::exception&) {
    KESTREL_FAIL(where, ": expected an integer argument, got '", text, "'");
  }
}

double ConfigArg::as_double(const std::string& where) const {
  try {
    KESTREL_CHECK(!is_list, "");
    size_t used = 0;
    double v = std::stod(text, &used);
    KESTREL_CHECK(used == text.size(), "");
    return v;
  } catch (const std::exception&) {
    KESTREL_FAIL(where, ": expected a number, got '", text, "'");
  }
}

bool ConfigArg::as_bool(const std::string& where) const {
  if (!is_list && (text == "True" || text == "true")) return true;
  if (!is_list && (text == "False" || text == "false")) return false;
  KESTREL_FAIL(where, ": expected True or False, got '", text, "'");
}

ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source) {
  const YAML::Node root = load_yaml(yaml_text, source);
  KESTREL_CHECK(root.IsMap(), source, ": a model yaml is a mapping with nc, depth_multiple, ",
                "width_multiple, anchors, backbone and head");
  ModelConfig cfg;
  cfg.path = source;
  // A yaml file's stem; "" for a yaml that came from elsewhere (a weights file's own), which the
  // reference's summary calls "Model".
  const std::string extension = std::filesystem::path(source).extension().string();
  cfg.name = extension == ".yaml" || extension == ".yml" ? std::filesystem::path(source).stem().string() : "";
  cfg.nc = required<int>(root, "nc", source);
  KESTREL_CHECK(cfg.nc >= 1 && cfg.nc <= kMaxClasses, source, ": nc must be in [1, ", kMaxClasses,
                "], got ", cfg.nc);
  cfg.depth_multiple = required<double>(root, "depth_multiple", source);
  cfg.width_multiple = required<double>(root, "width_multiple", source);
  for (const auto& [key, value] : {std::pair{"depth_multiple", cfg.depth_multiple},
                                   std::pair{"width_multiple", cfg.width_multiple}})
    KESTREL_CHECK(value > 0 && value <= kMaxMultiple, source, ": ", key, " ", value,
                  " is outside (0, ", kMaxMultiple, "]; the official models use 0.25 (n) to ",
                  "1.33 (x)");
  if (root["ch"]) cfg.input_channels = required<int>(root, "ch", source);
  KESTREL_CHECK(cfg.input_channels >= 1 && cfg.input_channels <= kMaxChannels, source, ": ch ",
                cfg.input_channels, " is outside [1, ", kMaxChannels, "] (images have 3 channels)");
  if (root["activation"]) {
    const std::string act = required<std::string>(root, "activation", source);
    KESTREL_CHECK(act == "nn.SiLU()", source, ": activation '", act,
                  "' is not supported; Kestrel's Conv uses SiLU (remove the key)");
  }

  const YAML::Node anchors = root["anchors"];
  KESTREL_CHECK(anchors, source, ": missing `anchors`");
  if (anchors.IsScalar()) {
    cfg.anchors_per_level = required<int>(root, "anchors", source);
    KESTREL_CHECK(cfg.anchors_per_level >= 1 && cfg.anchors_per_level <= kMaxAnchors, source,
                  ": anchors must be in [1, ", kMaxAnchors, "] per level, got ",
                  cfg.anchors_per_level, " (the official models use 3)");
  } else {
    KESTREL_CHECK(anchors.IsSequence() && anchors.size() > 0, source,
                  ": `anchors` must be a count or a list of [w,h, w,h, ...] per level");
    for (const auto& level : anchors) {
      std::vector<double> pairs;
      try {
        for (const auto& v : level) pairs.push_back(v.as<double>());
      } catch (const YAML::Exception&) {
        KESTREL_FAIL(source, ": anchors must be numbers");
      }
      KESTREL_CHECK(!pairs.empty() && pairs.size() % 2 == 0, source,
                    ": each anchor level needs w,h pairs, got ", pairs.size(), " numbers");
      KESTREL_CHECK(pairs.size() <= 2 * kMaxAnchors, source, ": ", pairs.size() / 2,
                    " anchors per level; at most ", kMaxAnchors, " are supported (the official models use 3)");
      KESTREL_CHECK(cfg.anchors.empty() || pairs.size() == cfg.anchors[0].size(), source,
                    ": every anchor level needs the same number of anchors");
      cfg.anchors.push_back(std::move(pairs));
    }
    cfg.anchors_per_level = static_cast<int>(cfg.anchors[0].size() / 2);
  }
  parse_rows(root["backbone"], "backbone", source, cfg);
  parse_rows(root["head"], "head", source, cfg);
  const std::string last = cfg.rows.empty() ? "" : cfg.rows.back().module;
  KESTREL_CHECK(last == "Detect" || last == "Segment" || last == "Classify", source,
                ": the last head row must be Detect (a detector), Segment (a -seg model) or Classify (a classifier)");
  return cfg;
}

namespace {

std::string yaml_arg(const ConfigArg& a) {
  if (!a.is_list) return a.text;
  std::string s = "[";
  for (size_t i = 0; i < a.items.size(); ++i) s += (i ? ", " : "") + yaml_arg(a.items[i]);
  return s + "]";
}

std::string yaml_row(const LayerRow& row) {
  std::string from;
  if (row.from_is_list) {
    for (size_t i = 0; i < row.from.size(); ++i) from += (i ? ", " : "") + std::to_string(row.from[i]);
    from = "[" + from + "]";
  } else {
    from = std::to_string(row.from[0]);
  }
  std::string args;
  for (size_t i = 0; i < row.args.size(); ++i) args += (i ? ", " : "") + yaml_arg(row.args[i]);
  return "  - [" + from + ", " + std::to_string(row.number) + ", " + row.module + ", [" + args + "]]\n";
}

}  // namespace

std::string model_config_yaml(const ModelConfig& config) {
  std::ostringstream os;
  os.precision(17);
  os << "nc: " << config.nc << "\n";
  os << "depth_multiple: " << config.depth_multiple << "\n";
  os << "width_multiple: " << config.width_multiple << "\n";
  if (config.input_channels != 3) os << "ch: " << config.input_channels << "\n";
  if (config.anchors.empty()) {
    os << "anchors: " << config.anchors_per_level << "\n";
  } else {
    os << "anchors:\n";
    for (const auto& level : config.anchors) {
      os << "  - [";
      for (size_t i = 0; i < level.size(); ++i) os << (i ? ", " : "") << level[i];
      os << "]\n";
    }
  }
  // The last row is the head; the rest the backbone (the split only names the rows).
  os << "backbone:\n";
  for (size_t i = 0; i + 1 < config.rows.size(); ++i) os << yaml_row(config.rows[i]);
  os << "head:\n";
  if (!config.rows.empty()) os << yaml_row(config.rows.back());
  return os.str();
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "cannot read model config '", path,
                "': check the path (the shipped ones are in models/, e.g. models/yolov5s.yaml)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace kestrel::yolo
