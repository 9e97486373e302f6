#include "yolo/train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/autograd.h"
#include "engine/safetensors_tensors.h"
#include "io/zip_archive.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"
#include "yolo/train/pt_resume.h"

namespace kestrel::yolo {
namespace {

constexpr const char* kFormat = kCheckpointFormat;
constexpr const char* kStripped = "stripped";

using Named = std::vector<std::pair<std::string, Tensor>>;

// A module's state in file layout (conv weights OIHW), names prefixed.
Named module_tensors(layers::Module& m, const std::string& prefix) {
  Named out;
  for (const layers::StateEntry& e : m.state_entries())
    out.emplace_back(prefix + e.name, e.ohwi_conv_weight ? e.slot->permute({0, 3, 1, 2}) : *e.slot);
  return out;
}

// Copies the file's tensors into `targets` (file-layout views of live tensors), checking that
// each is present with the same shape and dtype.
void restore(const SafetensorsFile& file, const Named& targets, const char* part) {
  std::vector<std::string> problems;
  for (const auto& [name, t] : targets) {
    if (!file.contains(name)) {
      problems.push_back("missing " + name);
      continue;
    }
    const SafetensorsEntry& fe = file.entry(name);
    if (fe.shape != t.shape()) problems.push_back(name + ": shape " + shape_str(fe.shape));
  }
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 10; ++i) list += "\n  " + problems[i];
    KESTREL_FAIL("checkpoint '", file.path(), "': the ", part, " state does not fit (",
                 problems.size(), " problems):", list,
                 "\nresume with the model, optimizer and options the checkpoint was made with");
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    Tensor src = safetensors_tensor(file, name);
    KESTREL_CHECK(src.dtype() == t.dtype(), "checkpoint '", file.path(), "': ", name, " is ",
                  dtype_name(src.dtype()), ", expected ", dtype_name(t.dtype()));
    t.copy_(src);
  }
}

json::Value integer(int64_t v) { return json::Value(v); }

std::string u64_text(uint64_t v) { return std::to_string(v); }
uint64_t parse_u64(const std::string& s, const std::string& path) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KESTREL_CHECK(ec == std::errc() && end == s.data() + s.size(), "checkpoint '", path,
                "': generator field '", s, "' is not an unsigned integer");
  return v;
}

const json::Value& member(const json::Value& obj, const char* key, const std::string& path) {
  const json::Value* v = obj.find(key);
  KESTREL_CHECK(v, "checkpoint '", path, "': metadata lacks '", key, "'");
  return *v;
}

const std::string& meta(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  KESTREL_CHECK(it != f.metadata().end(), "checkpoint '", f.path(), "' has no '", key,
                "' entry; is it a Kestrel training checkpoint (not bare weights)?");
  return it->second;
}

json::Value parse_meta(const SafetensorsFile& f, const std::string& key) {
  try {
    return json::parse(meta(f, key));
  } catch (const Error& e) {
    KESTREL_FAIL("checkpoint '", f.path(), "': metadata '", key, "' is not valid JSON (",
                 e.what(), ")");
  }
}

std::string hyp_json(const Hyp& hyp) {
  json::Object o;
  for (const auto& [k, v] : hyp.values()) o.emplace_back(k, json::Value(v));
  return json::dump(json::Value(std::move(o)));
}

// Shortest round-trip decimals back through the hyp yaml reader: the same doubles.
Hyp parse_hyp_json(const json::Value& v, const std::string& path) {
  std::string yaml;
  for (const auto& [k, value] : v.as_object()) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value.as_real());
    yaml += k + ": " + std::string(buf, end) + "\n";
  }
  return parse_hyp(yaml, "checkpoint '" + path + "' hyp");
}

CheckpointInfo info_from(const SafetensorsFile& f) {
  KESTREL_CHECK(meta(f, "format") == kFormat, "checkpoint '", f.path(), "' has format '",
                meta(f, "format"), "', expected ", kFormat);
  CheckpointInfo info;
  info.epoch = parse_meta(f, "epoch").as_integer();
  info.best_fitness = parse_meta(f, "best_fitness").as_real();
  info.hyp = parse_hyp_json(parse_meta(f, "hyp"), f.path());
  info.options = parse_meta(f, "options");
  auto stripped = f.metadata().find(kStripped);
  info.stripped = stripped != f.metadata().end() && stripped->second == "true";
  if (f.metadata().count("progress")) info.progress = parse_meta(f, "progress");
  const json::Value generators = parse_meta(f, "generators");
  for (const json::Value& g : generators.as_array())
    info.generators.push_back({member(g, "name", f.path()).as_string(),
                               parse_u64(member(g, "seed", f.path()).as_string(), f.path()),
                               parse_u64(member(g, "stream", f.path()).as_string(), f.path()),
                               parse_u64(member(g, "offset", f.path()).as_string(), f.path())});
  return info;
}

json::Value optimizer_json(const Optimizer& opt) {
  json::Array groups;
  for (const ParamGroup& g : opt.groups())
    groups.push_back(json::Object{{"label", g.label},
                                  {"params", integer(static_cast<int64_t>(g.params.size()))},
                                  {"lr", g.lr},
                                  {"initial_lr", g.initial_lr},
                                  {"momentum", g.momentum},
                                  {"weight_decay", g.weight_decay}});
  return json::Object{{"kind", optimizer_kind_name(opt.kind())}, {"groups", std::move(groups)}};
}

void restore_optimizer_groups(Optimizer& opt, const json::Value& v, const std::string& path) {
  const std::string kind = member(v, "kind", path).as_string();
  KESTREL_CHECK(kind == optimizer_kind_name(opt.kind()), "checkpoint '", path, "' holds ", kind,
                " state but the optimizer is ", optimizer_kind_name(opt.kind()),
                "; resume with the same --optimizer");
  const json::Array& groups = member(v, "groups", path).as_array();
  KESTREL_CHECK(groups.size() == opt.groups().size(), "checkpoint '", path, "' has ",
                groups.size(), " parameter groups, the optimizer ", opt.groups().size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const ParamGroup& g = opt.groups()[i];
    const int64_t n = member(groups[i], "params", path).as_integer();
    KESTREL_CHECK(n == static_cast<int64_t>(g.params.size()), "checkpoint '", path, "': group ",
                  i, " (", g.label, ") has ", n, " parameters in the file, ", g.params.size(),
                  " in the optimizer");
    opt.set_rates(i, Optimizer::Rates{member(groups[i], "lr", path).as_real(),
                                      member(groups[i], "initial_lr", path).as_real(),
                                      member(groups[i], "momentum", path).as_real(),
                                      member(groups[i], "weight_decay", path).as_real()});
  }
}

Named prefixed(const std::vector<std::pair<std::string, Tensor>>& in, const std::string& p) {
  Named out;
  for (const auto& [k, t] : in) out.emplace_back(p + k, t);
  return out;
}

// Pending accumulated gradients: into .grad in place where it exists (a DDP Reducer's views into
// its flat buffer), else as a new .grad on the parameter's device.
void restore_gradients(const SafetensorsFile& f, const Named& params) {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    if (!f.contains("grad." + name)) continue;
    Tensor g = safetensors_tensor(f, "grad." + name);
    KESTREL_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype(), "checkpoint '", f.path(),
                  "': grad.", name, " does not fit its parameter; resume with the model it was made with");
    if (p.grad().defined())
      p.grad().copy_(g);
    else
      p.set_grad(safetensors_tensor(f, "grad." + name, p.device()));
  }
}

// A stripped file's copy of a tensor: float16 where its values fit (|x| <= 65504, beyond which
// float16 has only Inf), else as it was.
Tensor half_where_it_fits(const Tensor& t) {
  if (!is_floating(t.dtype()) || t.dtype() == DType::F16) return t;
  const Tensor f32 = t.dtype() == DType::F32 ? t : t.to(DType::F32);
  const float* v = f32.data<float>();
  for (int64_t i = 0; i < f32.numel(); ++i)
    if (std::fabs(v[i]) > 65504.0f) return t;
  return f32.to(DType::F16);
}

}  // namespace

GeneratorState generator_state(const std::string& name, const Generator& g) {
  return {name, g.seed(), g.stream_id(), g.offset()};
}

Generator restore_generator(const GeneratorState& s) {
  Generator g(s.seed, s.stream_id);
  g.set_offset(s.offset);
  return g;
}

void save_checkpoint(const std::string& path, const TrainingObjects& o, const CheckpointInfo& info,
                     const PendingGradients& gradients) {
  KESTREL_CHECK(o.model, "save_checkpoint: no model given");
  Named tensors = module_tensors(*o.model, "model.");
  std::map<std::string, std::string> md;
  md["format"] = kFormat;
  md["epoch"] = std::to_string(info.epoch);
  md["best_fitness"] = json::dump(json::Value(info.best_fitness));
  md["hyp"] = hyp_json(info.hyp);
  md["options"] = json::dump(info.options);
  json::Array gens;
  for (const GeneratorState& g : info.generators)
    gens.push_back(json::Object{{"name", g.name},
                                {"seed", u64_text(g.seed)},
                                {"stream", u64_text(g.stream_id)},
                                {"offset", u64_text(g.offset)}});
  md["generators"] = json::dump(json::Value(std::move(gens)));
  if (o.ema) {
    for (auto& t : module_tensors(o.ema->module(), "ema.")) tensors.push_back(std::move(t));
    md["ema_updates"] = std::to_string(o.ema->updates());
  }
  if (o.optimizer) {
    for (auto& t : prefixed(o.optimizer->state_tensors(), "optimizer."))
      tensors.push_back(std::move(t));
    md["optimizer"] = json::dump(optimizer_json(*o.optimizer));
  }
  if (o.schedule) {
    const LrSchedule::State& s = o.schedule->state();
    md["schedule"] = json::dump(json::Object{{"last_epoch", integer(s.last_epoch)},
                                             {"accumulate", integer(s.accumulate)},
                                             {"last_opt_step", integer(s.last_opt_step)}});
  }
  if (o.scaler) {
    const GradScaler::State& s = o.scaler->state();
    md["scaler"] = json::dump(json::Object{{"scale", s.scale},
                                           {"growth_tracker", integer(s.growth_tracker)},
                                           {"skipped_steps", integer(s.skipped_steps)}});
  }
  for (const auto& [name, p] : gradients)
    if (p.grad().defined()) tensors.emplace_back("grad." + name, p.grad());
  md["progress"] = json::dump(info.progress);
  save_safetensors(path, tensors, md);
}

SafetensorsFile read_checkpoint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, sizeof head);
  if (!looks_like_zip(std::string_view(head, static_cast<size_t>(in.gcount())))) return load_safetensors(path);
  return pt_training_checkpoint(parse_pt_checkpoint(read_file_bytes(path), path));
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return info_from(read_checkpoint_file(path));
}

void check_resumable(const CheckpointInfo& info, const std::string& path) {
  KESTREL_CHECK(!info.stripped, "'", path, "' is a stripped final checkpoint: its run finished, and ",
                "stripping kept only the EMA weights in float16, without the optimizer state a ",
                "resumed run needs, so it cannot be resumed. To train on from it, start a new run ",
                "with --weights ", path);
}

CheckpointInfo load_checkpoint(const std::string& path, const TrainingObjects& o,
                               const PendingGradients& gradients) {
  KESTREL_CHECK(o.model, "load_checkpoint: no model given");
  const SafetensorsFile f = read_checkpoint_file(path);
  CheckpointInfo info = info_from(f);
  check_resumable(info, path);
  check_finite(f, path);  // a diverged run's weights would fail far from the cause
  restore(f, module_tensors(*o.model, "model."), "model");
  if (o.ema) {
    restore(f, module_tensors(o.ema->module(), "ema."), "EMA");
    o.ema->set_updates(parse_meta(f, "ema_updates").as_integer());
  }
  if (o.optimizer) {
    KESTREL_CHECK(f.metadata().count("optimizer"), "checkpoint '", path,
                  "' has no optimizer state (a stripped final checkpoint?); it cannot be resumed");
    restore_optimizer_groups(*o.optimizer, parse_meta(f, "optimizer"), path);
    restore(f, prefixed(o.optimizer->state_tensors(), "optimizer."), "optimizer");
  }
  if (o.schedule) {
    const json::Value s = parse_meta(f, "schedule");
    o.schedule->load_state({member(s, "last_epoch", path).as_integer(),
                            member(s, "accumulate", path).as_integer(),
                            member(s, "last_opt_step", path).as_integer()});
  }
  if (o.scaler) {
    const json::Value s = parse_meta(f, "scaler");
    o.scaler->load_state({member(s, "scale", path).as_real(),
                          member(s, "growth_tracker", path).as_integer(),
                          member(s, "skipped_steps", path).as_integer()});
  }
  restore_gradients(f, gradients);
  return info;
}

uint64_t strip_checkpoint(const std::string& path) {
  const SafetensorsFile f = load_safetensors(path);
  if (info_from(f).stripped) return std::filesystem::file_size(path);
  bool has_ema = false;
  for (const std::string& name : f.names()) has_ema = has_ema || name.rfind("ema.", 0) == 0;
  const std::string source = has_ema ? "ema." : "model.";
  Named tensors;
  for (const std::string& name : f.names())
    if (name.rfind(source, 0) == 0)
      tensors.emplace_back("model." + name.substr(source.size()), half_where_it_fits(safetensors_tensor(f, name)));
  KESTREL_CHECK(!tensors.empty(), "checkpoint '", path, "' holds no model weights to keep; is it a ",
                "Kestrel training checkpoint?");
  std::map<std::string, std::string> md = f.metadata();
  for (const char* key : {"optimizer", "schedule", "scaler", "ema_updates", "progress"}) md.erase(key);
  md[kStripped] = "true";
  save_safetensors(path, tensors, md);
  return std::filesystem::file_size(path);
}

}  // namespace kestrel::yolo
