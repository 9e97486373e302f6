#include "yolo/train/train_progress.h"

#include <cstdio>

#include "base/error.h"

namespace kestrel::yolo {
namespace {

const json::Value& field(const json::Value& v, const char* key, const std::string& path) {
  const json::Value* f = v.find(key);
  KESTREL_CHECK(f, "checkpoint '", path, "': its progress lacks '", key, "'; the file is damaged");
  return *f;
}

}  // namespace

void EpochProgress::add(double box, double obj, double cls) {
  const double values[3] = {box, obj, cls};
  add(values);
}

void EpochProgress::add(const double* values) {
  for (int k = 0; k < items; ++k) mloss[k] = (mloss[k] * seen + values[k]) / (seen + 1);
  ++seen;
}

json::Value RunProgress::to_json() const {
  json::Array mloss;
  for (int k = 0; k < epoch.items; ++k) mloss.emplace_back(epoch.mloss[k]);
  json::Object out{{"next_batch", json::Value(epoch.next_batch)},
                   {"mloss", std::move(mloss)},
                   {"seen", json::Value(epoch.seen)},
                   {"skipped", json::Value(epoch.skipped)},
                   {"nan_steps", json::Value(nan_steps)},
                   {"stopper_best_fitness", json::Value(stopper.best_fitness)},
                   {"stopper_best_epoch", json::Value(stopper.best_epoch)},
                   {"accumulated", json::Value(accumulated)},
                   {"window_nonfinite", json::Value(window_nonfinite)}};
  if (dataset) out.emplace_back("dataset", dataset->to_json());
  if (!class_maps.empty()) {
    json::Array maps;
    for (double m : class_maps) maps.emplace_back(m);
    out.emplace_back("class_maps", std::move(maps));
  }
  if (bucket_layout) {
    json::Array order, cuts;
    for (const std::string& name : bucket_layout->order) order.emplace_back(name);
    for (size_t i = 0; i < bucket_layout->cuts.size(); ++i)
      if (bucket_layout->cuts[i]) cuts.emplace_back(static_cast<int64_t>(i));
    out.emplace_back("bucket_layout", json::Object{{"order", std::move(order)},
                                                   {"cuts", std::move(cuts)},
                                                   {"bucket_cap_mb", json::Value(bucket_layout->bucket_cap_mb)},
                                                   {"edge_bucket_cap_mb", json::Value(bucket_layout->edge_bucket_cap_mb)}});
  }
  return out;
}

RunProgress RunProgress::from_json(const json::Value& v, const std::string& path) {
  RunProgress p;
  if (!v.is_object() || v.as_object().empty()) return p;
  p.epoch.next_batch = field(v, "next_batch", path).as_integer();
  const json::Array& mloss = field(v, "mloss", path).as_array();
  KESTREL_CHECK(mloss.size() == 3 || mloss.size() == 4, "checkpoint '", path, "': progress mloss needs 3 values (4 for segmentation)");
  p.epoch.items = static_cast<int>(mloss.size());
  for (int k = 0; k < p.epoch.items; ++k) p.epoch.mloss[k] = mloss[k].as_real();
  p.epoch.seen = field(v, "seen", path).as_integer();
  p.epoch.skipped = field(v, "skipped", path).as_integer();
  p.nan_steps = field(v, "nan_steps", path).as_integer();
  p.stopper.best_fitness = field(v, "stopper_best_fitness", path).as_real();
  p.stopper.best_epoch = field(v, "stopper_best_epoch", path).as_integer();
  p.accumulated = field(v, "accumulated", path).as_bool();
  // Absent from checkpoints written before non-finite losses were skipped per window.
  if (const json::Value* w = v.find("window_nonfinite")) p.window_nonfinite = w->as_bool();
  if (const json::Value* d = v.find("dataset")) p.dataset = DatasetFingerprint::from_json(*d, path);
  if (const json::Value* maps = v.find("class_maps"))
    for (const json::Value& m : maps->as_array()) p.class_maps.push_back(m.as_real());
  if (const json::Value* b = v.find("bucket_layout")) {
    dist::Reducer::SettledLayout layout;
    for (const json::Value& name : field(*b, "order", path).as_array()) layout.order.push_back(name.as_string());
    const json::Array& cuts = field(*b, "cuts", path).as_array();
    if (!cuts.empty()) layout.cuts.assign(layout.order.size(), false);
    for (const json::Value& c : cuts) {
      const int64_t i = c.as_integer();
      KESTREL_CHECK(i >= 0 && i < static_cast<int64_t>(layout.order.size()), "checkpoint '", path,
                    "': a bucket cut at ", i, " lies outside its ", layout.order.size(), " parameters; the file is damaged");
      layout.cuts[i] = true;
    }
    layout.bucket_cap_mb = field(*b, "bucket_cap_mb", path).as_real();
    layout.edge_bucket_cap_mb = field(*b, "edge_bucket_cap_mb", path).as_real();
    p.bucket_layout = std::move(layout);
  }
  KESTREL_CHECK(p.epoch.next_batch >= 0 && p.epoch.seen >= 0, "checkpoint '", path,
                "': negative batch counts in its progress; the file is damaged");
  return p;
}

std::string progress_line(int epoch, int epochs, double mem_gb, const EpochProgress& p,
                          int64_t instances, int64_t size, int64_t done, int64_t total, double seconds) {
  char mem[32], cell[64];
  std::snprintf(mem, sizeof mem, "%.3gG", mem_gb);
  std::snprintf(cell, sizeof cell, "%11s%11s", str(epoch, "/", epochs - 1).c_str(), mem);
  std::string line = cell;
  for (int k = 0; k < p.items; ++k) {
    std::snprintf(cell, sizeof cell, "%11.4g", p.mloss[k]);
    line += cell;
  }
  std::snprintf(cell, sizeof cell, "%11.4g%11.4g: ", static_cast<double>(instances), static_cast<double>(size));
  return line + cell + format_bar(done, total, seconds);
}

std::string progress_header(const std::vector<std::string>& loss_names) {
  std::vector<std::string> names = {"Epoch", "GPU_mem"};
  names.insert(names.end(), loss_names.begin(), loss_names.end());
  names.insert(names.end(), {"Instances", "Size"});
  std::string header = "\n";
  char cell[64];
  for (const std::string& n : names) {
    std::snprintf(cell, sizeof cell, "%11s", n.c_str());
    header += cell;
  }
  return header;
}

}  // namespace kestrel::yolo
