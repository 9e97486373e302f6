#include "yolo/model/weights.h"

#include <cmath>
#include <set>

#include "engine/autograd.h"
#include "io/json.h"
#include "layers/conv.h"
#include "yolo/model/weights_file.h"

namespace kestrel::yolo {
namespace {

// OHWI (memory) <-> OIHW (file) for 4-d conv weights.
Tensor to_file_layout(const layers::StateEntry& e) {
  return e.ohwi_conv_weight ? e.slot->permute({0, 3, 1, 2}) : *e.slot;
}

Shape file_shape(const layers::StateEntry& e) {
  const Shape& s = e.slot->shape();
  return e.ohwi_conv_weight ? Shape{s[0], s[3], s[1], s[2]} : s;
}

// Copies a file tensor (file layout, any float type) into the entry's slot.
void assign(const layers::StateEntry& e, const Tensor& file_tensor) {
  autograd::NoGradGuard no_grad;
  Tensor src = e.ohwi_conv_weight ? file_tensor.permute({0, 2, 3, 1}) : file_tensor;
  e.slot->copy_(src);
}

// The file dtypes a floating model tensor loads from.
bool file_floating(const std::string& file) {
  return file == "F16" || file == "BF16" || file == "F32" || file == "F64";
}

bool dtype_compatible(DType model, const std::string& file) {
  if (is_floating(model)) return file_floating(file);
  return (model == DType::I64 && file == "I64") || (model == DType::I32 && file == "I32") ||
         (model == DType::U8 && file == "U8");
}

template <class T>
bool finite_values(const T* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

// A tensor as get() returns it: contiguous, on the CPU.
bool all_finite(const Tensor& t) {
  if (t.dtype() == DType::F32) return finite_values(t.data<float>(), t.numel());
  if (t.dtype() == DType::F64) return finite_values(t.data<double>(), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)  // F16, BF16
    if (!std::isfinite(load_as_double(t.data_ptr(), t.dtype(), i))) return false;
  return true;
}

}  // namespace

void check_finite(const SafetensorsFile& file, const std::string& path, const std::string& prefix) {
  for (const std::string& name : file.names()) {
    if (name.rfind(prefix, 0) != 0 || !file_floating(file.entry(name).dtype)) continue;
    KESTREL_CHECK(all_finite(safetensors_tensor(file, name)), path, ": tensor '", name, "' holds NaN/Inf values; ",
                  "the checkpoint is damaged (a run that diverged saves such weights): use an ",
                  "earlier checkpoint, or train from scratch");
  }
}

void save_weights(layers::Module& model, const std::string& path, DType dtype,
                  const std::map<std::string, std::string>& metadata, const std::string& prefix) {
  KESTREL_CHECK(dtype == DType::F32 || dtype == DType::F16, "save_weights: weights are stored as ",
                "float32 or float16, not ", dtype_name(dtype));
  std::vector<std::pair<std::string, Tensor>> tensors;
  autograd::NoGradGuard no_grad;
  for (const layers::StateEntry& e : model.state_entries(prefix)) {
    Tensor t = to_file_layout(e);
    if (is_floating(t.dtype()) && t.dtype() != dtype) t = t.to(dtype);
    tensors.emplace_back(e.name, t);
  }
  save_safetensors(path, tensors, metadata);
}

void load_weights(layers::Module& model, const SafetensorsFile& file, const std::string& prefix) {
  layers::unfuse_convs(model);  // the folded copies would keep the old weights
  const std::string& path = file.path();
  std::vector<layers::StateEntry> entries = model.state_entries();
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const layers::StateEntry& e : entries) {
    const std::string name = prefix + e.name;
    expected.insert(name);
    if (!file.contains(name)) {
      problems.push_back("missing " + name);
      continue;
    }
    const SafetensorsEntry& fe = file.entry(name);
    if (fe.shape != file_shape(e))
      problems.push_back(str(e.name, ": shape ", shape_str(fe.shape), " in the file, ",
                             shape_str(file_shape(e)), " in the model"));
    else if (!dtype_compatible(e.slot->dtype(), fe.dtype))
      problems.push_back(str(e.name, ": dtype ", fe.dtype, " in the file, ",
                             dtype_name(e.slot->dtype()), " in the model"));
  }
  for (const std::string& name : file.names())
    if (name.rfind(prefix, 0) == 0 && !expected.count(name)) problems.push_back("unexpected " + name);
  if (!problems.empty()) {
    std::string list;
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) list += "\n  " + problems[i];
    if (problems.size() > shown) list += str("\n  ... and ", problems.size() - shown, " more");
    KESTREL_FAIL("weights '", path, "' do not fit this model (", problems.size(), " mismatches):",
                 list, "\nuse weights saved from the same model yaml and --nc, or start from ",
                 "them with transfer (train --weights) to copy what matches");
  }
  check_finite(file, path, prefix);
  for (const layers::StateEntry& e : entries) assign(e, safetensors_tensor(file, prefix + e.name));
}

std::string inference_prefix(const SafetensorsFile& file) {
  // By every name, not one: a file that lacks one tensor is reported as lacking it, not read under
  // another prefix where nothing fits.
  bool ema = false, model = false;
  for (const std::string& name : file.names()) {
    ema = ema || name.rfind("ema.model.", 0) == 0;
    model = model || name.rfind("model.model.", 0) == 0;
  }
  return ema ? "ema." : model ? "model." : "";
}

std::string weights_model_yaml(const SafetensorsFile& file) {
  const auto& m = file.metadata();
  if (auto options = m.find("options"); options != m.end()) {
    json::Value parsed;
    try {
      parsed = json::parse(options->second);
    } catch (const Error& e) {
      KESTREL_FAIL("'", file.path(), "': its options are not valid JSON (", e.what(), "); the file is damaged");
    }
    if (const json::Value* yaml = parsed.find("cfg_yaml"); yaml && yaml->is_string()) return yaml->as_string();
  }
  if (auto yaml = m.find("model_yaml"); yaml != m.end()) return yaml->second;
  KESTREL_FAIL("'", file.path(), "' carries no model yaml (plain weights): give the model with --cfg ",
               "(e.g. --cfg yolov5s.yaml)");
}

void load_weights(layers::Module& model, const std::string& path, const std::string& prefix) {
  load_weights(model, read_weights_file(path), prefix);
}

std::string load_inference_weights(layers::Module& model, const std::string& path) {
  const SafetensorsFile file = read_weights_file(path);
  const std::string prefix = inference_prefix(file);
  load_weights(model, file, prefix);
  return prefix;
}

TransferResult transfer_weights(layers::Module& model, const SafetensorsFile& file,
                                const std::vector<std::string>& exclude, const std::string& prefix) {
  layers::unfuse_convs(model);
  const std::string& path = file.path();
  check_finite(file, path, prefix);
  TransferResult r;
  for (const layers::StateEntry& e : model.state_entries()) {
    ++r.total;
    bool skip = false;
    for (const std::string& x : exclude) skip = skip || e.name.find(x) != std::string::npos;
    const std::string name = prefix + e.name;
    if (skip || !file.contains(name)) continue;
    const SafetensorsEntry& fe = file.entry(name);
    if (fe.shape != file_shape(e) || !dtype_compatible(e.slot->dtype(), fe.dtype)) continue;
    assign(e, safetensors_tensor(file, name));
    ++r.transferred;
  }
  return r;
}

TransferResult transfer_weights(layers::Module& model, const std::string& path,
                                const std::vector<std::string>& exclude, const std::string& prefix) {
  return transfer_weights(model, read_weights_file(path), exclude, prefix);
}

void round_to_half_precision(layers::Module& model) {
  autograd::NoGradGuard no_grad;
  for (const layers::StateEntry& e : model.state_entries()) {
    Tensor& t = *e.slot;
    if (is_floating(t.dtype()) && t.dtype() != DType::F16) t.copy_(t.to(DType::F16).to(t.dtype()));
  }
}

}  // namespace kestrel::yolo
