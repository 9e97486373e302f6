// Building a model for val/detect from a weights file: a training checkpoint (full or stripped)
// carries its model yaml, class count and names in its "options" metadata; weights converted by
// scripts/convert_ultralytics.py carry them as the metadata entries "model_yaml" (the yaml text),
// "nc" and "names" (a JSON list); other plain weights files need --cfg (and the class count from
// --nc or the dataset).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "yolo/model.h"

namespace kestrel::cli {

struct InferenceModel {
  std::shared_ptr<yolo::DetectionModel> model;
  std::vector<std::string> names;  // empty when the file has none
};

// nc applies to plain weights files; a checkpoint's own class count always wins.
InferenceModel load_inference_model(const std::string& weights, const std::string& cfg,
                                    std::optional<int> nc, Device device);

// cpu, a GPU index, or the first GPU when `spec` is empty and one is present.
Device inference_device(const std::string& spec);

}  // namespace kestrel::cli
