// The YOLOv5 model yaml format (reference v7.0): nc, depth_multiple, width_multiple, anchors,
// backbone and head rows of [from, number, module, args]. Parsing checks the structure and names
// the file and row of anything it cannot use; the builder (yolo/model/model.h) gives the rows meaning.
#pragma once
#include <string>
#include <vector>

namespace kestrel::yolo {

// One argument as written: a scalar (its text: "64", "False", "None", "nearest", "nc") or a list.
struct ConfigArg {
  std::string text;
  std::vector<ConfigArg> items;
  bool is_list = false;

  bool is_none() const { return !is_list && text == "None"; }
  int64_t as_int(const std::string& where) const;
  double as_double(const std::string& where) const;
  bool as_bool(const std::string& where) const;
};

struct LayerRow {
  std::vector<int> from;  // as written: -1 is the previous layer, other values absolute indices
  bool from_is_list = false;
  int number = 1;
  std::string module;  // "Conv", "C3", "Bottleneck", "SPPF", "nn.Upsample", "Concat", "Detect", "Segment", "Classify"
  std::vector<ConfigArg> args;
  std::string where;   // "models/yolov5s.yaml, head row 3 (layer 13)" for error messages
};

struct ModelConfig {
  std::string path;  // source file ("" when parsed from text)
  std::string name;  // file stem: "yolov5s"; "" when not parsed from a yaml file
  int nc = 80;
  int input_channels = 3;  // the optional `ch` key
  double depth_multiple = 1.0;
  double width_multiple = 1.0;
  // Per output level, the anchor (w, h) pairs in pixels; empty when the yaml gives only a count
  // (then anchors_per_level holds it and AutoAnchor computes them).
  std::vector<std::vector<double>> anchors;
  int anchors_per_level = 3;
  std::vector<LayerRow> rows;  // backbone rows, then head rows
};

ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source_name);

// The config as a model yaml that parse_model_config reads back to the same rows (every row but
// the last under `backbone`, the last under `head`): what a classifier's weights carry as their
// model_yaml, the reference's ClassificationModel having no yaml of its own.
std::string model_config_yaml(const ModelConfig& config);

}  // namespace kestrel::yolo
