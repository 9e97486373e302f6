#include "yolo/train/pt_resume.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include "base/error.h"
#include "yolo/common/text_file.h"
#include "yolo/common/yaml_load.h"
#include "yolo/train/checkpoint.h"

namespace kestrel::yolo {
namespace {

using pickle::Value;
namespace fs = std::filesystem;

// Kestrel's optimizer groups, in the reference's param_groups order (yolo/train/optimizer.h).
constexpr const char* kGroupLabels[] = {"bias", "weight(decay)", "weight(no decay)"};

const Value* entry(const Value& dict, std::string_view key) { return dict.is(Value::Kind::Dict) ? dict.find(key) : nullptr; }

// smart_optimizer's group of a parameter: biases, normalisation layers' weights (classes with
// "Norm" in their name), every other weight.
int group_of(const PtParameter& p) {
  if (p.leaf == "bias") return 0;
  const std::string cls = p.module_class.substr(p.module_class.find_last_of('.') + 1);
  return p.leaf == "weight" && cls.find("Norm") != std::string::npos ? 2 : 1;
}

// The text of _codecs.encode(text, 'latin1'): protocol 2's spelling of bytes.
std::string latin1_bytes(const Value& v, const std::string& where) {
  KESTREL_CHECK(v.is_call("_codecs.encode") && v.args->items.size() == 2 &&
                    v.args->items[0]->is(Value::Kind::String),
                where, ": its raw data is not _codecs.encode(text, 'latin1')");
  std::string out;
  const std::string& s = v.args->items[0]->text;  // valid UTF-8 (the unpickler checked)
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      KESTREL_CHECK((c & 0xE0) == 0xC0 && i + 1 < s.size(), where, ": latin-1 data holds a code point above 255");
      out.push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F)));
    }
  }
  return out;
}

// numpy's callees, as numpy 1 (numpy.core) and numpy 2 (numpy._core) pickle them.
bool is_numpy_call(const Value& v, std::string_view name) {
  return v.is_call(str("numpy.core.multiarray.", name)) || v.is_call(str("numpy._core.multiarray.", name));
}

// A numpy dtype record: dtype('f8', False, True) with BUILD state (3, '<', ...). True for a
// little-endian float64, which is all train.py's numbers use.
bool is_float64_dtype(const Value& dtype) {
  return dtype.is_call("numpy.dtype") && dtype.args && !dtype.args->items.empty() &&
         dtype.args->items[0]->is(Value::Kind::String) && dtype.args->items[0]->text == "f8" && dtype.state &&
         dtype.state->items.size() > 1 && dtype.state->items[1]->is(Value::Kind::String) &&
         dtype.state->items[1]->text != ">";
}

double float64_of(const std::string& data, const std::string& where) {
  KESTREL_CHECK(data.size() == sizeof(double), where, " holds ", data.size(), " bytes, not one float64");
  double out;
  std::memcpy(&out, data.data(), sizeof out);
  return out;
}

// A number as train.py leaves one in a checkpoint: a float or int; a numpy float64 scalar (the
// warm-up's np.interp writes those into every optimizer group's lr and momentum); or the
// 1-element float64 array fitness() returns (best_fitness). Anything else is refused by `where`.
double python_number(const Value& v, const std::string& where) {
  if (v.is(Value::Kind::Float)) return v.real;
  if (v.is(Value::Kind::Int)) return static_cast<double>(v.integer);
  // numpy.float64: scalar(dtype, raw bytes)
  if (is_numpy_call(v, "scalar")) {
    KESTREL_CHECK(v.args->items.size() == 2 && is_float64_dtype(*v.args->items[0]), where,
                  " is a numpy scalar, but not a little-endian float64");
    const Value& raw = *v.args->items[1];
    return float64_of(raw.is(Value::Kind::Bytes) ? raw.text : latin1_bytes(raw, where), where);
  }
  // numpy array: _reconstruct(ndarray, (0,), b'b') then BUILD (version, shape, dtype, fortran, data)
  KESTREL_CHECK(is_numpy_call(v, "_reconstruct") && v.state && v.state->is(Value::Kind::Tuple) &&
                    v.state->items.size() == 5,
                where, " is neither a number nor a numpy float64");
  KESTREL_CHECK(is_float64_dtype(*v.state->items[2]), where, " is a numpy array, but not of little-endian float64");
  const Value& raw = *v.state->items[4];
  return float64_of(raw.is(Value::Kind::Bytes) ? raw.text : latin1_bytes(raw, where), where);
}

// train.py's best_fitness: 0.0 until an epoch beats it, then fitness()'s 1-element array.
double best_fitness(const Value* v, const std::string& path) {
  if (!v || v->is(Value::Kind::None)) return 0.0;
  return python_number(*v, path + ": best_fitness");
}

// A plain YAML scalar as PyYAML reads it (yaml.safe_load: null, booleans, integers, floats), a
// quoted one as text.
json::Value yaml_scalar(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return json::Value(s);
  static const std::regex null_re("^(~|null|Null|NULL|)$"), true_re("^(true|True|TRUE)$"),
      false_re("^(false|False|FALSE)$"), int_re("^[-+]?[0-9]+$"),
      real_re(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (std::regex_match(s, null_re)) return json::Value();
  if (std::regex_match(s, true_re)) return json::Value(true);
  if (std::regex_match(s, false_re)) return json::Value(false);
  if (std::regex_match(s, int_re)) return json::Value(static_cast<int64_t>(std::stoll(s)));
  if (std::regex_match(s, real_re)) return json::Value(std::stod(s));
  return json::Value(s);
}

json::Value yaml_to_json(const YAML::Node& n, const std::string& where, int depth) {
  KESTREL_CHECK(depth < 8, where, ": nested deeper than an opt.yaml is");
  if (n.IsMap()) {
    json::Object out;
    for (const auto& kv : n) out.emplace_back(kv.first.as<std::string>(), yaml_to_json(kv.second, where, depth + 1));
    return json::Value(std::move(out));
  }
  if (n.IsSequence()) {
    json::Array out;
    for (const auto& item : n) out.push_back(yaml_to_json(item, where, depth + 1));
    return json::Value(std::move(out));
  }
  if (n.IsScalar()) return yaml_scalar(n);
  return json::Value();
}

// The options a resumed run continues with, as the reference's --resume picks them: the run
// folder's opt.yaml (two folders above last.pt, where train.py wrote it) when there is one, so
// that an edited opt.yaml (a dataset moved to another path) holds; else the checkpoint's opt.
// An opt.yaml whose hyp is not the values themselves is Kestrel's own (it names a file and keeps
// the values in hyp.yaml; a run Kestrel continues rewrites it): the checkpoint's opt holds then.
json::Value resume_options(const TorchFile& file, const Value& opt, const std::string& path) {
  const fs::path opt_yaml = fs::path(path).parent_path().parent_path() / "opt.yaml";
  if (!fs::is_regular_file(opt_yaml)) return to_json(file.document(), opt, path + ": opt");
  json::Value o = yaml_to_json(load_yaml(read_text(opt_yaml.string()), opt_yaml.string()), opt_yaml.string(), 0);
  KESTREL_CHECK(o.is_object(), opt_yaml.string(), ": not a mapping of train.py's options (vars(opt))");
  const json::Value* hyp = o.find("hyp");
  return hyp && hyp->is_object() ? o : to_json(file.document(), opt, path + ": opt");
}

// vars(opt) under Kestrel's option names (TrainOptions::to_pairs), every value a string; a
// segmentation run's (segment/train.py's, whose model is a SegmentationModel) with its task and
// its own flags, mask_ratio and no_overlap (the masks' form, as Kestrel's segment options name it).
json::Object options_of(const json::Value& o, const std::string& path, bool segment) {
  KESTREL_CHECK(o.is_object(), path, ": its 'opt' is not a dict (vars(opt))");
  auto text = [&](const char* key, std::string fallback = "") -> std::string {
    const json::Value* v = o.find(key);
    if (!v || v->is_null()) return fallback;
    if (v->is_string()) return v->as_string();
    if (v->is_bool()) return v->as_bool() ? "true" : "false";
    if (v->is_integer()) return std::to_string(v->as_integer());
    return json::dump(*v);  // reals and lists (freeze: [0])
  };
  const std::string cache = text("cache");
  json::Object out;
  for (const char* key : {"cfg", "data", "epochs", "batch_size", "imgsz", "rect", "nosave", "noval",
                          "noautoanchor", "noplots", "device", "multi_scale", "single_cls", "optimizer",
                          "sync_bn", "workers", "project", "name", "exist_ok", "cos_lr", "image_weights", "quad",
                          "label_smoothing", "patience", "freeze", "save_period", "seed"})
    out.emplace_back(key, text(key));
  // --cache True means ram in the reference; disk caching has no Kestrel twin, so it reads from disk.
  out.emplace_back("cache", cache == "true" || cache == "ram" ? "ram" : "");
  out.emplace_back("weights", "");
  out.emplace_back("hyp", "");  // the values travel in the checkpoint's hyp
  out.emplace_back("evolve", "null");
  if (segment) {
    out.emplace_back("task", "segment");
    out.emplace_back("mask_ratio", text("mask_ratio", "4"));
    out.emplace_back("no_overlap", text("no_overlap", "false"));
  }
  return out;
}

std::string hyp_of(const json::Value& opt, const std::string& path) {
  const json::Value* values = opt.find("hyp");
  KESTREL_CHECK(values && values->is_object(), path, ": opt['hyp'] is not the hyperparameter dict ",
                "train.py stores; not a v7.0 training checkpoint");
  json::Object out;
  for (const auto& [k, v] : values->as_object())
    if (v.is_integer() || v.is_real()) out.emplace_back(k, v.as_real());
  return json::dump(json::Value(std::move(out)));
}

// A number in a param group (python_number), or a refusal naming the group and key.
double group_number(const Value& group, const char* key, size_t g, const std::string& path) {
  const Value* v = entry(group, key);
  KESTREL_CHECK(v, path, ": optimizer group ", g, " has no number '", key, "'");
  return python_number(*v, str(path, ": optimizer group ", g, "'s '", key, "'"));
}

// Adam's and AdamW's group settings beyond lr and weight decay: betas[0] is Kestrel's per-group
// beta1 (the `momentum` slot, as the reference passes momentum as beta1); beta2, eps, amsgrad and
// maximize are fixed in Kestrel at smart_optimizer's values, so others are refused.
double adam_beta1(const Value& group, size_t g, const std::string& path) {
  const Value* betas = entry(group, "betas");
  KESTREL_CHECK(betas && (betas->is(Value::Kind::Tuple) || betas->is(Value::Kind::List)) && betas->items.size() == 2,
                path, ": Adam group ", g, " has no 'betas' pair");
  const std::string where = str(path, ": Adam group ", g, "'s betas");
  const double beta2 = python_number(*betas->items[1], where), eps = group_number(group, "eps", g, path);
  KESTREL_CHECK(beta2 == 0.999 && eps == 1e-8, path, ": Adam group ", g, " has betas[1] ", beta2, " and eps ", eps,
                "; Kestrel's Adam runs with the reference's 0.999 and 1e-8 only: start a new run with --weights ", path);
  for (const char* flag : {"amsgrad", "maximize"}) {
    const Value* v = entry(group, flag);
    KESTREL_CHECK(!v || (v->is(Value::Kind::Bool) && !v->boolean), path, ": Adam group ", g, " sets ", flag,
                  ", which Kestrel's Adam does not do: start a new run with --weights ", path);
  }
  return python_number(*betas->items[0], where);
}

// Adam's step count: an int (older torch) or a one-element tensor (torch >= 1.12: float32).
std::string adam_step(const PtCheckpoint& ckpt, const Value& v, const std::string& name) {
  const std::string& path = ckpt.file.path();
  double step = 0;
  if (v.is(Value::Kind::Int)) {
    step = static_cast<double>(v.integer);
  } else {
    const TorchTensor t = ckpt.file.tensor(v, "the Adam step of '" + name + "'");
    KESTREL_CHECK((t.dtype == "F32" && t.bytes.size() == 4) || (t.dtype == "F64" && t.bytes.size() == 8) ||
                      (t.dtype == "I64" && t.bytes.size() == 8),
                  path, ": the Adam step of '", name, "' is not one number");
    if (t.dtype == "F32") {
      float f;
      std::memcpy(&f, t.bytes.data(), 4);
      step = f;
    } else if (t.dtype == "F64") {
      std::memcpy(&step, t.bytes.data(), 8);
    } else {
      int64_t i;
      std::memcpy(&i, t.bytes.data(), 8);
      step = static_cast<double>(i);
    }
  }
  KESTREL_CHECK(step >= 0 && step == std::floor(step) && step < 9.0e15, path, ": the Adam step of '", name,
                "' is ", step, ", not a count");
  const auto count = static_cast<int64_t>(step);
  std::string bytes(sizeof count, '\0');
  std::memcpy(bytes.data(), &count, sizeof count);
  return bytes;
}

// One state slot of a parameter as a float32 tensor of its shape (zeros where the reference has no
// state yet, as the optimizers' first step starts from).
TorchTensor state_slot(const PtCheckpoint& ckpt, const Value* state, const char* slot, const PtParameter& p,
                       const Shape& shape) {
  const std::string what = std::string("the ") + slot + " of '" + p.name + "'";
  if (!state) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    return {"F32", shape, std::string(static_cast<size_t>(numel) * sizeof(float), '\0')};
  }
  const Value* v = entry(*state, slot);
  KESTREL_CHECK(v, ckpt.file.path(), ": optimizer state of '", p.name, "' has no ", slot);
  TorchTensor t = ckpt.file.tensor(*v, what);
  KESTREL_CHECK(t.dtype == "F32" && t.shape == shape, ckpt.file.path(), ": ", what,
                " is not a float32 tensor of its parameter's shape");
  return t;
}

// The optimizer's state_dict as Kestrel's optimizer state: SGD's momentum_buffer, or Adam's and
// AdamW's exp_avg, exp_avg_sq and step, per parameter under "optimizer.<name>.<slot>" (the
// reference's index mapped to the parameter's name), and the groups' settings.
std::string optimizer_of(const PtCheckpoint& ckpt, const Value& optimizer, const std::string& opt_name,
                         std::vector<SafetensorsFile::Part>& parts) {
  const std::string& path = ckpt.file.path();
  const bool adam = opt_name == "Adam" || opt_name == "AdamW";
  KESTREL_CHECK(opt_name == "SGD" || adam, path, ": a run with --optimizer ", opt_name, "; Kestrel resumes the ",
                "reference's SGD, Adam and AdamW runs: start a new run with --weights ", path);
  const Value* state = entry(optimizer, "state");
  const Value* groups = entry(optimizer, "param_groups");
  KESTREL_CHECK(state && groups && groups->is(Value::Kind::List) && groups->items.size() == 3, path,
                ": the optimizer state_dict has no 'state' or not the reference's three param_groups");
  std::vector<std::vector<const PtParameter*>> by_group(3);
  const std::vector<PtParameter> params = pt_parameters(ckpt);
  for (const PtParameter& p : params) by_group[group_of(p)].push_back(&p);
  std::map<int64_t, const Value*> states;
  for (const auto& [k, v] : state->entries) {
    KESTREL_CHECK(k->is(Value::Kind::Int) && v->is(Value::Kind::Dict) && entry(*v, adam ? "exp_avg" : "momentum_buffer"),
                  path, ": optimizer state entries must be {index: {", adam ? "step, exp_avg, exp_avg_sq" : "momentum_buffer",
                  "}} for ", opt_name);
    states[k->integer] = v;
  }
  json::Array group_json;
  int64_t index = 0;
  for (size_t g = 0; g < 3; ++g) {
    const Value& group = *groups->items[g];
    const Value* ids = entry(group, "params");
    KESTREL_CHECK(ids && ids->items.size() == by_group[g].size(), path, ": optimizer group ", g, " (",
                  kGroupLabels[g], ") has ", ids ? ids->items.size() : 0, " parameters, the model ",
                  by_group[g].size(), "; the checkpoint's model and optimizer disagree");
    json::Object settings = {{"label", kGroupLabels[g]}, {"params", static_cast<int64_t>(by_group[g].size())}};
    settings.emplace_back("lr", group_number(group, "lr", g, path));
    settings.emplace_back("initial_lr", group_number(group, "initial_lr", g, path));
    settings.emplace_back("momentum", adam ? adam_beta1(group, g, path) : group_number(group, "momentum", g, path));
    settings.emplace_back("weight_decay", group_number(group, "weight_decay", g, path));
    group_json.push_back(std::move(settings));
    for (size_t k = 0; k < by_group[g].size(); ++k, ++index) {
      const Value* id = ids->items[k];
      KESTREL_CHECK(id->is(Value::Kind::Int) && id->integer == index, path, ": optimizer group ", g,
                    " does not number its parameters in order");
      const PtParameter& p = *by_group[g][k];
      const Shape shape = ckpt.file.tensor(*p.tensor, "parameter '" + p.name + "'").shape;
      const auto it = states.find(index);
      const Value* s = it == states.end() ? nullptr : it->second;
      for (const char* slot : adam ? std::vector<const char*>{"exp_avg", "exp_avg_sq"} : std::vector<const char*>{"momentum_buffer"}) {
        TorchTensor t = state_slot(ckpt, s, slot, p, shape);
        parts.push_back({"optimizer." + p.name + "." + slot, std::move(t.dtype), std::move(t.shape), std::move(t.bytes)});
      }
      if (adam) {
        const Value* step = s ? entry(*s, "step") : nullptr;
        KESTREL_CHECK(!s || step, path, ": the Adam state of '", p.name, "' has no step");
        parts.push_back({"optimizer." + p.name + ".step", "I64", Shape{},
                         step ? adam_step(ckpt, *step, p.name) : std::string(sizeof(int64_t), '\0')});
      }
    }
  }
  return json::dump(json::Object{{"kind", opt_name}, {"groups", std::move(group_json)}});
}

}  // namespace

SafetensorsFile pt_training_checkpoint(const PtCheckpoint& ckpt) {
  const std::string& path = ckpt.file.path();
  const Value& root = *ckpt.root;
  KESTREL_CHECK(root.is(Value::Kind::Dict), path, ": a bare model, not a training checkpoint; train from it with --weights");
  const SafetensorsFile weights = pt_weights(ckpt);
  std::vector<SafetensorsFile::Part> parts;
  for (const std::string& name : weights.names()) {  // float16 -> float32, as train.py's .float()
    Tensor t = safetensors_tensor(weights, name);
    if (t.dtype() == DType::F16) t = t.to(DType::F32);
    const auto* bytes = static_cast<const char*>(t.data_ptr());
    parts.push_back({name, weights.entry(name).dtype == "F16" ? "F32" : weights.entry(name).dtype, t.shape(),
                     std::string(bytes, bytes + t.numel() * t.element_size())});
  }
  std::map<std::string, std::string> md = {{"format", kCheckpointFormat}, {"generators", "[]"}, {"progress", "{}"}};
  const Value* epoch = root.find("epoch");
  KESTREL_CHECK(epoch && epoch->is(Value::Kind::Int), path, ": no integer 'epoch'; not a YOLOv5 training checkpoint");
  md["epoch"] = std::to_string(epoch->integer);
  md["best_fitness"] = json::dump(json::Value(best_fitness(root.find("best_fitness"), path)));
  const Value* opt = root.find("opt");
  KESTREL_CHECK(opt && opt->is(Value::Kind::Dict), path, ": no 'opt' dict (vars(opt)); not a v7.0 training checkpoint");
  const Value* optimizer = root.find("optimizer");
  const bool stripped = !optimizer || optimizer->is(Value::Kind::None) || !ckpt.ema;
  const json::Value run_options = stripped ? to_json(ckpt.file.document(), *opt, path + ": opt") : resume_options(ckpt.file, *opt, path);
  md["hyp"] = stripped && !run_options.find("hyp") ? "{}" : hyp_of(run_options, path);  // a release's opt may lack it
  const auto task = weights.metadata().find("task");
  const bool segment = task != weights.metadata().end() && task->second == "segment";
  json::Object options = options_of(run_options, path, segment);
  options.emplace_back("cfg_yaml", weights.metadata().at("model_yaml"));
  if (auto nc = weights.metadata().find("nc"); nc != weights.metadata().end())
    options.emplace_back("nc", json::parse(nc->second));
  if (auto names = weights.metadata().find("names"); names != weights.metadata().end())
    options.emplace_back("names", json::parse(names->second));
  const json::Value options_json(std::move(options));
  md["options"] = json::dump(options_json);
  auto option = [&](const char* key) { return options_json.find(key)->as_string(); };

  if (stripped) {
    md["stripped"] = "true";  // strip_optimizer's best.pt: weights only
    return SafetensorsFile::assemble(path, std::move(parts), std::move(md));
  }
  const Value* updates = root.find("updates");
  KESTREL_CHECK(updates && updates->is(Value::Kind::Int), path, ": an EMA without integer 'updates'");
  md["ema_updates"] = std::to_string(updates->integer);
  md["optimizer"] = optimizer_of(ckpt, *optimizer, option("optimizer"), parts);
  int64_t batch_size = 0;
  const std::string batch_text = option("batch_size");
  const auto [end, ec] = std::from_chars(batch_text.data(), batch_text.data() + batch_text.size(), batch_size);
  KESTREL_CHECK(ec == std::errc() && end == batch_text.data() + batch_text.size() && batch_size > 0, path,
                ": opt['batch_size'] is not a positive integer");
  const int64_t accumulate = std::max<int64_t>(std::llround(64.0 / static_cast<double>(batch_size)), 1);
  md["schedule"] = json::dump(json::Object{{"last_epoch", epoch->integer}, {"accumulate", accumulate},
                                           {"last_opt_step", int64_t{-1}}});
  md["scaler"] = json::dump(json::Object{{"scale", 65536.0}, {"growth_tracker", int64_t{0}}, {"skipped_steps", int64_t{0}}});
  return SafetensorsFile::assemble(path, std::move(parts), std::move(md));
}

}  // namespace kestrel::yolo
