#include "yolo/model/pt_checkpoint.h"

#include <algorithm>
#include <set>

#include "base/error.h"
#include "yolo/model/pt_classifier.h"

namespace kestrel::yolo {
namespace {

using pickle::Value;

// The reference's classes a v7.0 detection checkpoint pickles (the modules its model yamls
// build), and what else its records use: a module's _non_persistent_buffers_set (a set; protocol
// 2 spells builtins "__builtin__"), and train.py's numpy numbers: best_fitness, a numpy array,
// and the float64 scalars the warm-up writes into the optimizer's groups (each rebuilt from its
// dtype and raw bytes, which protocol 2 pickles as _codecs.encode(text, 'latin1'); numpy 2
// spells the module numpy._core).
const std::set<std::string> kYolov5Globals = {
    "models.yolo.DetectionModel", "models.yolo.Model", "models.yolo.Detect",
    "models.yolo.ClassificationModel", "models.common.Classify",
    // A -seg model; its Segment keeps Detect.forward as an attribute, which pickle writes as
    // getattr(Detect, 'forward'): a record like the rest, never called.
    "models.yolo.SegmentationModel", "models.yolo.Segment", "models.common.Proto",
    "__builtin__.getattr", "builtins.getattr",
    // A classifier's checkpoint also pickles its inference transforms (model.transforms) and the
    // options' save_dir as a path: records, never called.
    "torchvision.transforms.transforms.Compose", "torchvision.transforms.transforms.Normalize",
    "utils.augmentations.CenterCrop", "utils.augmentations.ToTensor", "pathlib.PosixPath",
    "models.common.Conv",         "models.common.C3",  "models.common.SPPF",
    "models.common.SPP",          "models.common.Bottleneck", "models.common.Concat",
    "models.common.Focus",        "__builtin__.set",   "builtins.set",
    "numpy.core.multiarray._reconstruct", "numpy.core.multiarray.scalar", "numpy._core.multiarray._reconstruct",
    "numpy._core.multiarray.scalar", "numpy.ndarray", "numpy.dtype", "_codecs.encode",
};
// torch.nn's own modules (Conv2d, BatchNorm2d, SiLU, Upsample, MaxPool2d, Sequential, ...):
// records like the rest, whatever their class.
constexpr std::string_view kTorchModules = "torch.nn.modules.";

constexpr int kMaxModuleDepth = 32;  // YOLOv5's module trees are 4 deep

using Items = std::vector<std::pair<Value*, Value*>>;

// A module's _parameters / _buffers / _modules: an OrderedDict record (items set on it) or a
// plain dict.
const Items* dict_items(const Value* v) {
  if (v && (v->is(Value::Kind::Dict) || v->is_call("collections.OrderedDict"))) return &v->entries;
  return nullptr;
}

std::set<std::string> non_persistent_buffers(const Value& state) {
  std::set<std::string> names;
  const Value* set = state.find("_non_persistent_buffers_set");
  const bool is_set = set && (set->is_call("__builtin__.set") || set->is_call("builtins.set"));
  if (!is_set || !set->args || set->args->items.empty()) return names;
  for (const Value* item : set->args->items[0]->items)
    if (item->is(Value::Kind::String)) names.insert(item->text);
  return names;
}

// A module record's _parameters, _buffers and _modules, checked.
struct ModuleParts {
  const Items* parameters;
  const Items* buffers;
  const Items* children;
  std::set<std::string> non_persistent;
};

ModuleParts module_parts(const TorchFile& file, const Value& module, const std::string& what) {
  KESTREL_CHECK(module.is(Value::Kind::Object) && module.state && module.state->is(Value::Kind::Dict),
                file.path(), ": ", what, " is not a pickled torch module (",
                module.is(Value::Kind::Object) ? module.text : pickle::kind_name(module.kind), ")");
  const Value& state = *module.state;
  ModuleParts parts{dict_items(state.find("_parameters")), dict_items(state.find("_buffers")),
                    dict_items(state.find("_modules")), non_persistent_buffers(state)};
  KESTREL_CHECK(parts.parameters && parts.buffers && parts.children, file.path(), ": ", what, " (",
                module.text, ") lacks _parameters, _buffers or _modules; not a torch module");
  for (const Items* items : {parts.parameters, parts.buffers, parts.children})
    for (const auto& item : *items)
      KESTREL_CHECK(item.first->is(Value::Kind::String), file.path(), ": ", what, " has a member not named by a string");
  return parts;
}

// model.modules()' order: each module, then its children, depth first; `visit(module, parts,
// prefix)` with prefix "model.3.cv1." (empty for the model itself).
// Held to a budget of visits (pickle::WalkBudget): children shared by many parents are walked
// once per parent, so a tree of shared modules nested a few dozen deep is refused, not walked.
template <class Visit>
void walk_modules_within(const TorchFile& file, const Value& module, const std::string& prefix, int depth,
                         pickle::WalkBudget& budget, Visit&& visit) {
  const std::string what = prefix.empty() ? "the model" : "module '" + prefix.substr(0, prefix.size() - 1) + "'";
  KESTREL_CHECK(depth <= kMaxModuleDepth, file.path(), ": ", what, " is nested deeper than ",
                kMaxModuleDepth, " modules; not a YOLOv5 model");
  budget.visit();
  const ModuleParts parts = module_parts(file, module, what);
  visit(module, parts, prefix);
  for (const auto& [k, child] : *parts.children)
    if (!child->is(Value::Kind::None))
      walk_modules_within(file, *child, prefix + k->text + ".", depth + 1, budget, visit);
}

template <class Visit>
void walk_modules(const TorchFile& file, const Value& module, Visit&& visit) {
  pickle::WalkBudget budget(file.document(), file.path() + ": the model's module tree");
  walk_modules_within(file, module, "", 0, budget, visit);
}

// state_dict's names and order: per module its parameters, then its persistent buffers.
void collect_state(const TorchFile& file, const Value& model, const std::string& key_prefix,
                   std::vector<SafetensorsFile::Part>& out) {
  walk_modules(file, model, [&](const Value&, const ModuleParts& parts, const std::string& prefix) {
    auto add = [&](const Items& items, bool buffer) {
      for (const auto& [k, v] : items) {
        if (v->is(Value::Kind::None) || (buffer && parts.non_persistent.count(k->text))) continue;
        const std::string name = prefix + k->text;
        TorchTensor t = file.tensor(*v, "tensor '" + name + "'");
        out.push_back({key_prefix + name, std::move(t.dtype), std::move(t.shape), std::move(t.bytes)});
      }
    };
    add(*parts.parameters, false);
    add(*parts.buffers, true);
  });
}

const Value* model_attribute(const Value& model, std::string_view name) {
  return model.state ? model.state->find(name) : nullptr;
}

// The class names, from a list or (as v7.0's check_dataset leaves them) a dict {index: name}.
std::optional<json::Array> class_names(const Value* names, const std::string& path) {
  if (!names) return std::nullopt;
  json::Array out;
  if (names->is(Value::Kind::List) || names->is(Value::Kind::Tuple)) {
    for (const Value* n : names->items) {
      KESTREL_CHECK(n->is(Value::Kind::String), path, ": a class name is not a string");
      out.emplace_back(n->text);
    }
    return out;
  }
  KESTREL_CHECK(names->is(Value::Kind::Dict), path, ": the model's names are neither a list nor a dict");
  std::vector<std::pair<int64_t, std::string>> indexed;
  for (const auto& [k, v] : names->entries) {
    KESTREL_CHECK(k->is(Value::Kind::Int) && v->is(Value::Kind::String), path,
                  ": the model's names are not a dict of index to name");
    indexed.emplace_back(k->integer, v->text);
  }
  std::sort(indexed.begin(), indexed.end());
  for (size_t i = 0; i < indexed.size(); ++i) {
    KESTREL_CHECK(indexed[i].first == static_cast<int64_t>(i), path, ": the class names skip index ", i);
    out.emplace_back(indexed[i].second);
  }
  return out;
}

json::Value to_json_at(const Value& v, const std::string& what, int depth, pickle::WalkBudget& budget) {
  KESTREL_CHECK(depth <= 64, what, " is nested too deeply");
  budget.visit();
  switch (v.kind) {
    case Value::Kind::None: return json::Value();
    case Value::Kind::Bool: return json::Value(v.boolean);
    case Value::Kind::Int: return json::Value(v.integer);
    case Value::Kind::Float: return json::Value(v.real);
    case Value::Kind::String: return json::Value(v.text);
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      json::Array a;
      for (const Value* x : v.items) a.push_back(to_json_at(*x, what, depth + 1, budget));
      return a;
    }
    case Value::Kind::Dict: {
      json::Object o;
      for (const auto& [k, x] : v.entries) {
        KESTREL_CHECK(k->is(Value::Kind::String) || k->is(Value::Kind::Int), what, " has a key that is no string");
        const std::string key = k->is(Value::Kind::String) ? k->text : std::to_string(k->integer);
        auto same = [&](const auto& member) { return member.first == key; };
        const json::Value value = to_json_at(*x, what, depth + 1, budget);
        auto it = std::find_if(o.begin(), o.end(), same);  // a later SETITEM wins, as in Python
        if (it != o.end()) it->second = value;
        else o.emplace_back(key, value);
      }
      return o;
    }
    default:
      KESTREL_FAIL(what, " holds a ", v.is(Value::Kind::Object) ? v.text : pickle::kind_name(v.kind),
                   " where a plain value (number, string, list, dict) was expected");
  }
}

}  // namespace

bool is_yolov5_global(const std::string& name) {
  return kYolov5Globals.count(name) || name.rfind(kTorchModules, 0) == 0;
}

json::Value to_json(const pickle::Document& doc, const Value& v, const std::string& what) {
  pickle::WalkBudget budget(doc, what);
  return to_json_at(v, what, 0, budget);
}

std::vector<PtParameter> pt_parameters(const PtCheckpoint& ckpt) {
  std::vector<PtParameter> out;
  walk_modules(ckpt.file, *ckpt.model, [&](const Value& module, const ModuleParts& parts, const std::string& prefix) {
    for (const auto& [k, v] : *parts.parameters)
      if (!v->is(Value::Kind::None)) out.push_back({prefix + k->text, k->text, module.text, v});
  });
  return out;
}

PtCheckpoint parse_pt_checkpoint(std::string bytes, const std::string& path) {
  PtCheckpoint c{TorchFile::parse(std::move(bytes), path, is_yolov5_global)};
  const Value& root = c.file.root();
  c.root = &root;
  auto is_model = [](const Value* v) {
    return v && (v->is_call("models.yolo.DetectionModel") || v->is_call("models.yolo.Model") ||
                 v->is_call("models.yolo.ClassificationModel") || v->is_call("models.yolo.SegmentationModel"));
  };
  if (is_model(&root)) {  // torch.save(model)
    c.model = &root;
    return c;
  }
  KESTREL_CHECK(root.is(Value::Kind::Dict), path, ": the checkpoint is a ",
                root.is(Value::Kind::Object) ? root.text : pickle::kind_name(root.kind),
                ", not a YOLOv5 checkpoint dict or model");
  c.model = root.find("model");
  KESTREL_CHECK(is_model(c.model), path, ": its 'model' entry is ",
                c.model ? (c.model->is(Value::Kind::Object) ? c.model->text : pickle::kind_name(c.model->kind)) : "missing",
                ", not a YOLOv5 DetectionModel, SegmentationModel or ClassificationModel; is this a YOLOv5 v7.0 checkpoint?");
  const Value* ema = root.find("ema");
  if (is_model(ema)) c.ema = ema;
  return c;
}

SafetensorsFile pt_weights(const PtCheckpoint& ckpt) {
  const std::string& path = ckpt.file.path();
  std::vector<SafetensorsFile::Part> parts;
  collect_state(ckpt.file, *ckpt.model, "model.", parts);
  if (ckpt.ema) collect_state(ckpt.file, *ckpt.ema, "ema.", parts);

  // As convert_ultralytics.py: names and yaml from the EMA where there is one, else the model.
  const Value& source = ckpt.ema ? *ckpt.ema : *ckpt.model;
  std::map<std::string, std::string> metadata = {{"format", kPtWeightsFormat},
                                                 {"source", path.substr(path.find_last_of('/') + 1)}};
  const Value* yaml = model_attribute(source, "yaml");
  json::Value yaml_json;
  if (!yaml && source.is_call("models.yolo.ClassificationModel")) {  // v7.0's classifiers keep no yaml
    metadata["model_yaml"] = classifier_yaml_from_pt(source, path);
    metadata["task"] = "classify";
  } else {
    KESTREL_CHECK(yaml && yaml->is(Value::Kind::Dict), path, ": the model carries no yaml dict; ",
                  "is this a YOLOv5 v7.0 checkpoint?");
    yaml_json = to_json(ckpt.file.document(), *yaml, path + ": the model's yaml");
    metadata["model_yaml"] = json::dump(yaml_json);
    if (source.is_call("models.yolo.SegmentationModel")) metadata["task"] = "segment";
  }
  // The yaml file the model was built from (absent when it was built from a yaml dict): the
  // reference's model summary is named after it.
  if (const Value* file = model_attribute(source, "yaml_file"); file && file->is(Value::Kind::String))
    metadata["model_yaml_file"] = file->text;
  std::optional<int64_t> nc;
  if (const Value* n = model_attribute(source, "nc"); n && n->is(Value::Kind::Int)) nc = n->integer;
  else if (const json::Value* n = yaml_json.find("nc"); n && n->is_integer()) nc = n->as_integer();
  if (nc) metadata["nc"] = std::to_string(*nc);
  if (std::optional<json::Array> names = class_names(model_attribute(source, "names"), path);
      names && (!nc || static_cast<int64_t>(names->size()) == *nc))
    metadata["names"] = json::dump(json::Value(std::move(*names)));
  return SafetensorsFile::assemble(path, std::move(parts), std::move(metadata));
}

}  // namespace kestrel::yolo
