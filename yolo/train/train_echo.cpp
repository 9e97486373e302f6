#include "yolo/train/train_echo.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "yolo/common/console.h"

namespace kestrel::yolo {
namespace {

// train.py's parse_opt, in its order (local_rank, set by torch's launcher, has no Kestrel flag).
constexpr std::array kReferenceOrder = {
    "weights",     "cfg",          "data",       "hyp",           "epochs",         "batch_size",
    "imgsz",       "rect",         "resume",     "nosave",        "noval",          "noautoanchor",
    "noplots",     "evolve",       "bucket",     "cache",         "image_weights",  "device",
    "multi_scale", "single_cls",   "optimizer",  "sync_bn",       "workers",        "project",
    "name",        "exist_ok",     "quad",       "cos_lr",        "label_smoothing", "patience",
    "freeze",      "save_period",  "seed",       "entity",        "upload_dataset", "bbox_interval",
    "artifact_alias"};

// opt.yaml's spelling (YAML) as Python prints the same value.
std::string python_value(const std::string& key, const std::string& value) {
  if (value == "true") return "True";
  if (value == "false") return "False";
  if (value == "null") return "None";
  if (key == "cache" && value.empty()) return "None";  // the flag's default in the reference
  if (key == "freeze" && value == "[]") return "[0]";  // freezing no layer, as the reference says it
  if (key == "label_smoothing" || key == "bucket_cap_mb" || key == "edge_bucket_mb" || key == "dist_timeout" || key == "dist_phase_timeout") {
    try {
      return python_float(std::stod(value));
    } catch (const std::exception&) {
    }
  }
  return value;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> train_args_echo(const TrainOptions& o) {
  std::vector<std::pair<std::string, std::string>> pairs = o.to_pairs();
  const std::string resume = !o.resume ? "False" : o.resume->empty() ? "True" : *o.resume;
  const auto rect = std::find_if(pairs.begin(), pairs.end(), [](const auto& kv) { return kv.first == "rect"; });
  pairs.insert(rect == pairs.end() ? pairs.end() : rect + 1, {"resume", resume});
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* key : kReferenceOrder)
    for (const auto& [k, v] : pairs)
      if (k == key) out.emplace_back(k, python_value(k, v));
  for (const auto& [k, v] : pairs)
    if (std::find_if(kReferenceOrder.begin(), kReferenceOrder.end(), [&k = k](const char* r) { return k == r; }) ==
        kReferenceOrder.end())
      out.emplace_back(k, python_value(k, v));
  return out;
}

std::string hyp_echo(const Hyp& hyp) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [key, value] : hyp.in_file_order())
    // `anchors` is a count, an integer in the reference's yaml files.
    pairs.emplace_back(key, key == "anchors" ? std::to_string(std::lround(value)) : python_float(value));
  return args_text(pairs);
}

}  // namespace kestrel::yolo
