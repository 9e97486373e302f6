#include "yolo/train/reference_opt.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <regex>
#include <set>

#include "yolo/common/console.h"

namespace kestrel::yolo {
namespace {

using json::Value;

// A string PyYAML's resolver would read as something else (null, bool, int, float), or that
// a plain scalar cannot hold: those are quoted.
bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::regex plain(R"(^[A-Za-z0-9_./][A-Za-z0-9_./+\-]*$)");
  if (!std::regex_match(s, plain)) return true;
  static const std::regex other_type(
      R"(^(~|null|Null|NULL|yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|y|Y|n|N)$)"
      R"(|^[-+]?[0-9][0-9_]*$|^[-+]?0[xob][0-9a-fA-F_]+$|^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+]?[0-9]+)?$)"
      R"(|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$|^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$)");
  return std::regex_match(s, other_type) || s == "." ;
}

std::string scalar(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return v.as_bool() ? "true" : "false";
    case Value::Kind::Integer: return std::to_string(v.as_integer());
    case Value::Kind::Real: {
      const double d = v.as_real();
      if (std::isnan(d)) return ".nan";
      if (std::isinf(d)) return d > 0 ? ".inf" : "-.inf";
      std::string r = python_float(d);  // Python's repr; PyYAML adds ".0" to a bare mantissa
      const size_t e = r.find('e');
      if (e != std::string::npos && r.find('.') == std::string::npos) r.insert(e, ".0");
      return r;
    }
    case Value::Kind::String: {
      const std::string& s = v.as_string();
      if (!needs_quotes(s)) return s;
      std::string out = "'";
      for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
      return out + "'";
    }
    default: return "";
  }
}

void dump_into(std::string& out, const json::Object& m, const std::string& indent) {
  for (const auto& [k, v] : m) {
    out += indent + scalar(Value(k)) + ":";
    if (v.is_object() && !v.as_object().empty()) {
      out += "\n";
      dump_into(out, v.as_object(), indent + "  ");
    } else if (v.is_array() && !v.as_array().empty()) {
      out += "\n";
      for (const Value& item : v.as_array()) out += indent + "- " + scalar(item) + "\n";
    } else if (v.is_object()) {
      out += " {}\n";
    } else if (v.is_array()) {
      out += " []\n";
    } else {
      out += " " + scalar(v) + "\n";
    }
  }
}

}  // namespace

json::Value typed_option_value(const std::string& text) {
  if (text == "true") return Value(true);
  if (text == "false") return Value(false);
  if (text == "null") return Value();
  int64_t i = 0;
  if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
      ec == std::errc() && end == text.data() + text.size() && !text.empty())
    return Value(i);
  double d = 0;
  if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
      ec == std::errc() && end == text.data() + text.size() && !text.empty())
    return Value(d);
  return Value(text);
}

json::Object reference_hyp(const Hyp& hyp) {
  json::Object out;
  for (const auto& [k, v] : hyp.in_file_order())
    // `anchors` as the hyp file wrote it: 3 (hyp.scratch-*) stays an integer, 3.412 (hyp.VOC) a
    // float; the model rounds it, the file keeps it.
    out.emplace_back(k, k == "anchors" && v == std::floor(v) ? Value(static_cast<int64_t>(v)) : Value(v));
  return out;
}

json::Object reference_opt(const TrainOptions& o, const ReferenceOptContext& c) {
  const bool segment = o.task == TrainTaskKind::Segment;
  const bool resumed = !c.resumed_from.empty();
  json::Array freeze;
  for (int f : o.freeze) freeze.emplace_back(static_cast<int64_t>(f));
  if (freeze.empty()) freeze.emplace_back(int64_t{0});  // the reference's "freeze nothing"
  const std::string cache = cache_mode_name(o.cache);
  json::Object out;
  out.emplace_back("weights", resumed ? c.resumed_from : o.weights);
  out.emplace_back("cfg", o.cfg);
  out.emplace_back("data", c.data_yaml.empty() ? (o.data.empty() ? std::string("synthetic") : o.data) : c.data_yaml);
  out.emplace_back("hyp", c.hyp ? Value(reference_hyp(*c.hyp)) : Value(o.hyp));
  out.emplace_back("epochs", static_cast<int64_t>(o.epochs));
  out.emplace_back("batch_size", static_cast<int64_t>(o.batch_size));
  out.emplace_back("imgsz", static_cast<int64_t>(o.img_size));
  out.emplace_back("rect", o.rect);
  out.emplace_back("resume", resumed);
  out.emplace_back("nosave", o.nosave);
  out.emplace_back("noval", o.noval);
  out.emplace_back("noautoanchor", o.noautoanchor);
  out.emplace_back("noplots", o.noplots);
  out.emplace_back("evolve", o.evolve > 0 ? Value(static_cast<int64_t>(o.evolve)) : Value());
  out.emplace_back("bucket", "");
  out.emplace_back("cache", cache.empty() ? Value() : Value(cache));
  out.emplace_back("image_weights", o.image_weights);
  out.emplace_back("device", o.device);
  out.emplace_back("multi_scale", o.multi_scale);
  out.emplace_back("single_cls", o.single_cls);
  out.emplace_back("optimizer", optimizer_kind_name(o.optimizer));
  out.emplace_back("sync_bn", o.sync_bn);
  out.emplace_back("workers", static_cast<int64_t>(o.workers));
  out.emplace_back("project", o.project);
  out.emplace_back("name", o.name);
  out.emplace_back("exist_ok", o.exist_ok);
  out.emplace_back("quad", o.quad);
  out.emplace_back("cos_lr", o.cos_lr);
  out.emplace_back("label_smoothing", o.label_smoothing);
  out.emplace_back("patience", static_cast<int64_t>(o.patience));
  out.emplace_back("freeze", std::move(freeze));
  out.emplace_back("save_period", static_cast<int64_t>(o.save_period));
  out.emplace_back("seed", static_cast<int64_t>(o.seed));
  out.emplace_back("local_rank", int64_t{-1});
  if (segment) {
    out.emplace_back("mask_ratio", static_cast<int64_t>(o.mask_ratio));
    out.emplace_back("no_overlap", o.no_overlap_masks);
  } else {
    out.emplace_back("entity", Value());
    out.emplace_back("upload_dataset", false);
    out.emplace_back("bbox_interval", int64_t{-1});
    out.emplace_back("artifact_alias", "latest");
  }
  out.emplace_back("save_dir", c.save_dir);
  return out;
}

json::Object opt_yaml_values(const TrainOptions& o, const ReferenceOptContext& c) {
  json::Object out = reference_opt(o, c);
  std::set<std::string> taken;
  for (const auto& [k, v] : out) taken.insert(k);
  for (const auto& [k, v] : o.to_pairs())
    if (taken.insert(k).second) out.emplace_back(k, typed_option_value(v));
  return out;
}

std::string python_yaml_dump(const json::Object& mapping) {
  std::string out;
  dump_into(out, mapping, "");
  return out;
}

}  // namespace kestrel::yolo
