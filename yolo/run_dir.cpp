#include "yolo/run_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kernels/error.h"

namespace kestrel::yolo {

std::string increment_path(const std::string& path, bool exist_ok) {
  namespace fs = std::filesystem;
  if (exist_ok || !fs::exists(path)) return path;
  for (int n = 2; n < 10000; ++n) {
    const std::string candidate = path + std::to_string(n);
    if (!fs::exists(candidate)) return candidate;
  }
  KESTREL_FAIL("no free run directory name after ", path, "9999; clean up ", path, "*");
}

const std::vector<std::string>& ResultsCsv::columns() {
  static const std::vector<std::string> names = {
      "train/box_loss",   "train/obj_loss",  "train/cls_loss", "metrics/precision",
      "metrics/recall",   "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss",
      "val/obj_loss",     "val/cls_loss",    "x/lr0",          "x/lr1",
      "x/lr2"};
  return names;
}

void ResultsCsv::append(int epoch, const std::vector<double>& values) const {
  KESTREL_CHECK(values.size() == columns().size(), "results.csv row needs ", columns().size(),
                " values, got ", values.size());
  const bool fresh = !std::filesystem::exists(path_);
  std::ofstream out(path_, std::ios::app);
  KESTREL_CHECK(out, "cannot write '", path_, "'");
  char cell[64];
  if (fresh) {
    std::string header;
    std::snprintf(cell, sizeof cell, "%20s", "epoch");
    header += cell;
    for (const auto& c : columns()) {
      std::snprintf(cell, sizeof cell, ",%20s", c.c_str());
      header += cell;
    }
    out << header << "\n";
  }
  std::string row;
  std::snprintf(cell, sizeof cell, "%20.5g", static_cast<double>(epoch));
  row += cell;
  for (double v : values) {
    std::snprintf(cell, sizeof cell, ",%20.5g", v);
    row += cell;
  }
  out << row << "\n";
}

void write_yaml_pairs(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::ofstream out(path);
  KESTREL_CHECK(out, "cannot write '", path, "'");
  for (const auto& [k, v] : pairs) out << k << ": " << v << "\n";
}

}  // namespace kestrel::yolo
