// Ultralytics YOLOv5 v7.0 checkpoints (.pt), read without Python: released weights (`model` in
// float16 with its names), training checkpoints (`model`, `ema`, `optimizer`, `epoch`,
// `best_fitness`, `updates`, `opt`) and stripped ones (strip_optimizer's best.pt). The pickle is
// read by io/torch_file, which runs nothing: only the classes such a checkpoint holds
// (the reference's models.yolo/models.common modules, torch.nn's modules, torch's tensor
// records, OrderedDict, set) are admitted, as plain records, and anything else is refused by name.
//
// A model record is walked as torch's state_dict walks it (_parameters, then persistent
// _buffers, then _modules), giving the reference's names ("model.0.conv.weight",
// "model.24.anchors"), which are Kestrel's (yolo/model/weights.h) and scripts/convert_ultralytics.py's.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/safetensors_tensors.h"
#include "io/json.h"
#include "io/torch_file.h"

namespace kestrel::yolo {

// The "format" metadata of weights read from a .pt.
inline constexpr const char* kPtWeightsFormat = "ultralytics-yolov5-pt";

// Whether a pickled global may appear in a YOLOv5 v7.0 checkpoint (besides torch's own).
bool is_yolov5_global(const std::string& qualified_name);

// A checkpoint's pickle, with the parts Kestrel uses located.
struct PtCheckpoint {
  TorchFile file;
  const pickle::Value* model = nullptr;  // the DetectionModel record (required)
  const pickle::Value* ema = nullptr;    // its EMA, in a training checkpoint
  const pickle::Value* root = nullptr;   // the checkpoint dict (or the model, if saved bare)
};

// Parses the archive and the pickle and finds the model; `bytes` is the whole file.
PtCheckpoint parse_pt_checkpoint(std::string bytes, const std::string& path);

// A pickled plain value of `doc` (None, bool, int, float, str, list, tuple, dict with str or int
// keys) as JSON; anything else throws naming `what`, and so do lists or dicts shared so often that
// their copies would expand past doc's walk budget (pickle::WalkBudget).
json::Value to_json(const pickle::Document& doc, const pickle::Value& v, const std::string& what);

// The model's parameters in model.modules() order, each module's as named_parameters(recurse=False)
// lists them (the order the reference's smart_optimizer builds its groups in).
struct PtParameter {
  std::string name;          // "model.0.conv.weight"
  std::string leaf;          // "weight"
  std::string module_class;  // "torch.nn.modules.conv.Conv2d"
  const pickle::Value* tensor;
};
std::vector<PtParameter> pt_parameters(const PtCheckpoint& ckpt);

// The checkpoint as Kestrel's weights loaders read a file: "model.<name>" tensors, "ema.<name>"
// where it has an EMA, and the metadata scripts/convert_ultralytics.py writes ("model_yaml" (as
// JSON, which YAML reads), "nc", "names", "source", "format"), so no --cfg is needed.
SafetensorsFile pt_weights(const PtCheckpoint& ckpt);

}  // namespace kestrel::yolo
