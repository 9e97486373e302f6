#include "yolo/model/classifier_file.h"

#include <filesystem>

#include "base/error.h"
#include "io/json.h"
#include "yolo/common/shipped_files.h"
#include "yolo/model/release_weights.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

namespace kestrel::yolo {
namespace {

const std::string* metadata_entry(const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata().find(key);
  return it == file.metadata().end() ? nullptr : &it->second;
}

// A JSON metadata entry, parsed; null when absent.
json::Value parsed_entry(const SafetensorsFile& file, const std::string& key, const std::string& path) {
  const std::string* text = metadata_entry(file, key);
  if (!text) return json::Value();
  try {
    return json::parse(*text);
  } catch (const Error& e) {
    KESTREL_FAIL("'", path, "': its ", key, " are not valid JSON (", e.what(), "); the file is damaged");
  }
}

// A value the file carries: a .pt's (or converted file's) own metadata entry, or a training
// checkpoint's options (Kestrel's classify checkpoints keep names, nc and imgsz there).
json::Value carried(const SafetensorsFile& file, const std::string& key, const std::string& path) {
  json::Value v = parsed_entry(file, key, path);
  if (!v.is_null()) return v;
  const json::Value options = parsed_entry(file, "options", path);
  const json::Value* in_options = options.is_object() ? options.find(key) : nullptr;
  return in_options ? *in_options : json::Value();
}

std::vector<std::string> names_in(const SafetensorsFile& file, const std::string& path) {
  std::vector<std::string> out;
  const json::Value names = carried(file, "names", path);
  if (names.is_null()) return out;
  KESTREL_CHECK(names.is_array(), "'", path, "': its class names are not a list; the file is damaged");
  for (const auto& n : names.as_array()) out.push_back(n.as_string());
  return out;
}

// The model yaml of a weights file, parsed.
ModelConfig config_of(const SafetensorsFile& file, const std::string& path) {
  return parse_model_config(weights_model_yaml(file), path + " (its model yaml)");
}

bool is_yaml(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".yaml" || ext == ".yml";
}

}  // namespace

bool is_classifier_weights(const std::string& path) {
  try {
    if (weights_format(path) == WeightsFormat::kOnnx) return false;
    return is_classifier_config(config_of(read_weights_file(path), path));
  } catch (const Error&) {
    return false;
  }
}

LoadedClassifier load_classifier_weights(const std::string& path, Device device) {
  const std::string local = fetch_missing_weights(path, /*classify=*/true);
  KESTREL_CHECK(weights_format(local) != WeightsFormat::kOnnx, "'", path, "' is an ONNX graph; classify val and ",
                "predict run a classifier's .pt or .safetensors");
  const SafetensorsFile file = read_weights_file(local);
  ModelConfig config = config_of(file, path);
  KESTREL_CHECK(is_classifier_config(config), "'", path, "' is a detection model (its last layer is ",
                config.rows.empty() ? "missing" : config.rows.back().module, "), not a classifier: train a classifier from it ",
                "with `kestrel classify train --model ", path, "` (cut at --cutoff 10), or run it with kestrel val / detect");
  LoadedClassifier out;
  out.model = std::make_shared<ClassificationModel>(config);
  load_weights(*out.model, file, inference_prefix(file));
  out.model->set_loaded_from_file(true);
  out.model->to(device);
  out.model->train(false);
  out.names = names_in(file, path);
  if (const json::Value size = carried(file, "imgsz", path); size.is_integer()) out.img_size = static_cast<int>(size.as_integer());
  return out;
}

LoadedClassifier load_classifier_for_training(const std::string& model, int nc, std::optional<int> cutoff,
                                              bool pretrained, uint64_t seed) {
  LoadedClassifier out;
  std::optional<SafetensorsFile> file;
  ModelConfig config;
  if (is_yaml(model)) {
    config = load_model_config(find_shipped_file(model, "--model"));
  } else {
    const std::string local = fetch_missing_weights(model, /*classify=*/true);
    KESTREL_CHECK(std::filesystem::exists(local), "--model ", model, ": no such file; give a classifier or detector ",
                  "(.pt, .safetensors), a release name (yolov5s-cls.pt, yolov5s.pt) or a model yaml (yolov5s.yaml)");
    file = read_weights_file(local);
    config = config_of(*file, model);
    out.names = names_in(*file, model);
  }
  if (is_classifier_config(config)) {
    KESTREL_CHECK(!cutoff || !file, "--cutoff ", *cutoff, ": '", model, "' is already a classifier (cut at layer ",
                  config.rows.size(), "); --cutoff applies to detectors and detection yamls");
  } else {
    out.from_detector = true;
    out.cutoff = cutoff.value_or(kDefaultCutoff);
    config = classifier_config(config, nc, out.cutoff);
  }
  out.model = std::make_shared<ClassificationModel>(config, seed);
  if (file && pretrained) {
    if (out.from_detector) {
      // The kept layers have the detector's names (model.0 ... model.<cutoff - 2>); the new head
      // matches nothing.
      out.transfer = transfer_weights(*out.model, *file, {}, inference_prefix(*file));
    } else {
      load_weights(*out.model, *file, inference_prefix(*file));
    }
  }
  out.model->set_classes(nc, seed + 1);
  out.model->set_loaded_from_file(file.has_value());
  return out;
}

}  // namespace kestrel::yolo
