#include "yolo/model/segmentation_file.h"

#include <filesystem>

#include "base/error.h"
#include "io/json.h"
#include "yolo/model/classification_model.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

namespace kestrel::yolo {
namespace {

// What a file holds, read once: its weights, and its model when it carries one.
// A training checkpoint's option (its "options" metadata, JSON), or null when the file has none.
std::optional<json::Value> checkpoint_option(const SafetensorsFile& file, const char* key, const std::string& path) {
  const auto it = file.metadata().find("options");
  if (it == file.metadata().end()) return std::nullopt;
  json::Value options;
  try {
    options = json::parse(it->second);
  } catch (const Error& e) {
    KESTREL_FAIL("'", path, "': its training options are not valid JSON (", e.what(), "); the file is damaged");
  }
  const json::Value* v = options.is_object() ? options.find(key) : nullptr;
  return v ? std::optional<json::Value>(*v) : std::nullopt;
}

struct ReadFile {
  std::optional<SafetensorsFile> file;
  std::optional<ModelConfig> config;  // empty: plain weights without their yaml
};

ReadFile read_model_file(const std::string& path) {
  ReadFile out;
  out.file = read_weights_file(path);
  std::string yaml;
  try {
    yaml = weights_model_yaml(*out.file);
  } catch (const Error&) {
    return out;
  }
  out.config = parse_model_config(yaml, path + " (its model yaml)");
  // A training checkpoint (kestrel segment train's) records the run's class count beside its yaml.
  if (const std::optional<json::Value> nc = checkpoint_option(*out.file, "nc", path)) out.config->nc = static_cast<int>(nc->as_integer());
  // The reference names its model after the yaml file (YOLOv5n-seg summary: ...).
  if (const auto it = out.file->metadata().find("model_yaml_file"); it != out.file->metadata().end())
    out.config->name = std::filesystem::path(it->second).stem().string();
  return out;
}

std::vector<std::string> names_in(const SafetensorsFile& file, const std::string& path) {
  std::vector<std::string> out;
  json::Value names;
  if (const std::optional<json::Value> trained = checkpoint_option(file, "names", path)) {  // a training checkpoint's
    names = *trained;
  } else {
    const auto it = file.metadata().find("names");
    if (it == file.metadata().end()) return out;
    try {
      names = json::parse(it->second);
    } catch (const Error& e) {
      KESTREL_FAIL("'", path, "': its class names are not valid JSON (", e.what(), "); the file is damaged");
    }
  }
  KESTREL_CHECK(names.is_array(), "'", path, "': its class names are not a list; the file is damaged");
  for (const auto& n : names.as_array()) out.push_back(n.as_string());
  return out;
}

LoadedSegmenter build(const ModelConfig& config, const SafetensorsFile& file, const std::string& path, Device device) {
  LoadedSegmenter out;
  out.model = std::make_shared<SegmentationModel>(config);
  load_weights(*out.model, file, inference_prefix(file));
  out.model->to(device);
  out.model->train(false);
  out.names = names_in(file, path);
  return out;
}

}  // namespace

std::optional<LoadedSegmenter> try_load_segmentation_weights(const std::string& path, Device device) {
  ReadFile read;
  try {
    if (!std::filesystem::is_regular_file(path) || weights_format(path) == WeightsFormat::kOnnx) return std::nullopt;
    read = read_model_file(path);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!read.config || !is_segmentation_config(*read.config)) return std::nullopt;
  return build(*read.config, *read.file, path, device);
}

LoadedSegmenter load_segmentation_weights(const std::string& path, Device device) {
  KESTREL_CHECK(std::filesystem::exists(path), "--weights ", path, ": no such file; give a segmentation model's ",
                "weights (the reference's -seg .pt, e.g. yolov5s-seg.pt, or a Kestrel .safetensors of one)");
  KESTREL_CHECK(weights_format(path) != WeightsFormat::kOnnx, "--weights ", path, ": an ONNX graph, which this reader does not take; ",
                "kestrel segment val and segment predict run a -seg .onnx themselves (OpenCV DNN)");
  const ReadFile read = read_model_file(path);
  KESTREL_CHECK(read.config, "--weights ", path, ": plain weights without their model yaml; the segment commands need ",
                "a -seg model's .pt (the reference's) or a Kestrel checkpoint, which carry their model");
  KESTREL_CHECK(!is_classifier_config(*read.config), "--weights ", path, ": a classifier's weights (its head is ",
                "Classify); run it with `kestrel classify predict`, or give a -seg model");
  KESTREL_CHECK(is_segmentation_config(*read.config), "--weights ", path, ": a detection model's weights (its head ",
                "is Detect, without mask coefficients); run it with `kestrel detect`, or give a segmentation ",
                "model (a Segment head), e.g. the reference's yolov5s-seg.pt");
  return build(*read.config, *read.file, path, device);
}

}  // namespace kestrel::yolo
