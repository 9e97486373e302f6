#include "yolo/train_options.h"

#include <charconv>

namespace kestrel::yolo {

namespace {
// Shortest decimals that read back as the same double (std::to_string keeps 6 digits).
std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}
}  // namespace

std::vector<std::pair<std::string, std::string>> TrainOptions::to_pairs() const {
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  std::string freeze_text = "[";
  for (size_t i = 0; i < freeze.size(); ++i) freeze_text += (i ? ", " : "") + std::to_string(freeze[i]);
  freeze_text += "]";
  return {{"weights", weights},
          {"cfg", cfg},
          {"data", data.empty() ? "synthetic" : data},
          {"hyp", hyp},
          {"epochs", std::to_string(epochs)},
          {"batch_size", std::to_string(batch_size)},
          {"imgsz", std::to_string(img_size)},
          {"rect", b(rect)},
          {"nosave", b(nosave)},
          {"noval", b(noval)},
          {"noautoanchor", b(noautoanchor)},
          {"noplots", b(noplots)},
          {"cache", cache},
          {"image_weights", b(image_weights)},
          {"device", device},
          {"multi_scale", b(multi_scale)},
          {"single_cls", b(single_cls)},
          {"optimizer", optimizer},
          {"sync_bn", b(sync_bn)},
          {"workers", std::to_string(workers)},
          {"project", project},
          {"name", name},
          {"exist_ok", b(exist_ok)},
          {"quad", b(quad)},
          {"cos_lr", b(cos_lr)},
          {"label_smoothing", number_text(label_smoothing)},
          {"patience", std::to_string(patience)},
          {"freeze", freeze_text},
          {"save_period", std::to_string(save_period)},
          {"seed", std::to_string(seed)},
          {"deterministic", b(deterministic)},
          {"amp", amp},
          {"bucket_cap_mb", number_text(bucket_cap_mb)},
          {"edge_bucket_mb", number_text(edge_bucket_mb)},
          {"no_overlap", b(no_overlap)},
          {"timed_buckets", b(timed_buckets)},
          {"grad_compress", grad_compress},
          {"check_sync", b(check_sync)},
          {"cuda_graph", cuda_graph},
          {"max_batches", std::to_string(max_batches)},
          {"evolve", evolve > 0 ? std::to_string(evolve) : "null"},
          {"no_tensorboard", b(no_tensorboard)}};
}

json::Value options_json(const TrainOptions& o, const std::string& cfg_text, int nc,
                         const std::vector<std::string>& names) {
  json::Object obj;
  for (const auto& [k, v] : o.to_pairs()) obj.emplace_back(k, v);
  obj.emplace_back("cfg_yaml", cfg_text);
  obj.emplace_back("nc", static_cast<int64_t>(nc));
  json::Array name_list;
  for (const auto& n : names) name_list.emplace_back(n);
  obj.emplace_back("names", name_list);
  return obj;
}

}  // namespace kestrel::yolo
