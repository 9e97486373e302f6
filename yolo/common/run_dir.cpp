#include "yolo/common/run_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "io/atomic_file.h"

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

namespace {

// True when this call made `dir`; false when something of that name already existed.
bool make_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0) return true;
  KESTREL_CHECK(errno == EEXIST, "cannot create the run directory '", dir, "': ", std::strerror(errno),
                "; check that --project is writable");
  return false;
}

}  // namespace

ClaimedRunDir claim_run_dir(const std::string& path, bool exist_ok) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);  // a failure shows in mkdir below
  if (exist_ok) {
    const bool created = make_directory(path);
    KESTREL_CHECK(created || fs::is_directory(path), "'", path, "' exists and is not a directory; ",
                  "remove it or choose another --name");
    return {path, RunDirLock::acquire(path, "choose another --name, or drop --exist-ok to get a new "
                                            "directory"), created};
  }
  for (int n = 1; n < 10000; ++n) {
    const std::string candidate = n == 1 ? path : path + std::to_string(n);
    if (!make_directory(candidate)) continue;
    // A run given this name with --exist-ok may have locked it between our mkdir and now.
    if (std::optional<RunDirLock> lock = RunDirLock::try_acquire(candidate))
      return {candidate, std::move(*lock), true};
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

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::string ResultsCsv::header_line() const {
  char cell[64];
  std::snprintf(cell, sizeof cell, "%*s", width_, "epoch");
  std::string header = cell;
  for (const auto& c : *columns_) {
    std::snprintf(cell, sizeof cell, ",%*s", width_, c.c_str());
    header += cell;
  }
  return header + "\n";
}

// The whole file is rewritten through a temporary each time (a few KB): a kill leaves the old
// rows or the new ones, never half a row.
void ResultsCsv::append(int epoch, const std::vector<double>& values) const {
  KESTREL_CHECK(values.size() == columns_->size(), "results.csv row needs ", columns_->size(),
                " values, got ", values.size());
  std::string text = std::filesystem::exists(path_) ? read_all(path_) : header_line();
  char cell[64];
  std::snprintf(cell, sizeof cell, "%*.5g", width_, static_cast<double>(epoch));
  text += cell;
  for (double v : values) {
    std::snprintf(cell, sizeof cell, ",%*.5g", width_, v);
    text += cell;
  }
  write_file_atomic(path_, text + "\n");
}

int ResultsCsv::keep_through(int last_epoch) const {
  if (!std::filesystem::exists(path_)) return 0;
  std::istringstream in(read_all(path_));
  std::string text, line;
  int dropped = 0;
  for (bool first = true; std::getline(in, line); first = false) {
    if (!first) {
      double epoch = 0;  // a '%20.5g' cell: 100000 reads back as 1e+05
      if (std::sscanf(line.c_str(), "%lf", &epoch) != 1 || epoch > last_epoch) {
        ++dropped;
        continue;
      }
    }
    text += line + "\n";
  }
  if (dropped) write_file_atomic(path_, text);
  return dropped;
}

void write_yaml_pairs(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string text;
  for (const auto& [k, v] : pairs) text += k + ": " + v + "\n";
  write_file_atomic(path, text);
}

void check_checkpoint_folder(const std::string& weights_dir) {
  try {
    write_file_atomic(weights_dir + "/.write-test", "");
    std::filesystem::remove(weights_dir + "/.write-test");
  } catch (const std::exception& e) {
    KESTREL_FAIL("cannot write checkpoints to ", weights_dir, " (", e.what(), "); make it writable, or give ",
                 "another --project or --name");
  }
}

}  // namespace kestrel::yolo
