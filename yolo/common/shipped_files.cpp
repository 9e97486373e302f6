#include "yolo/common/shipped_files.h"

#include <algorithm>

#include "base/error.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Files under `dir` (recursively) whose path ends with the components of `tail`.
std::vector<fs::path> matches_below(const fs::path& dir, const fs::path& tail) {
  std::vector<fs::path> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  const std::vector<fs::path> want(tail.begin(), tail.end());
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const fs::path rel = it->path().lexically_relative(dir);
    const std::vector<fs::path> parts(rel.begin(), rel.end());
    if (parts.size() >= want.size() && std::equal(want.rbegin(), want.rend(), parts.rbegin()))
      found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The shipped files a flag may name by file name: datasets (data/*.yaml) for --data,
// hyperparameters (data/hyps/) for --hyp, models for the rest; "" where none are shipped.
std::string shipped_choices(const std::vector<fs::path>& roots, const std::string& flag) {
  const bool data = flag == "--data", hyp = flag == "--hyp";
  const std::string sub = data ? "data" : hyp ? "data/hyps" : "models";
  const char* kind = data ? "datasets" : hyp ? "hyperparameter files" : "models";
  for (const fs::path& root : roots) {
    std::vector<std::string> names;
    for (const fs::path& p : matches_below(root / sub, ""))
      if (p.extension() == ".yaml" && (!data || p.parent_path() == root / sub)) names.push_back(p.filename().string());
    if (names.empty()) continue;
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return str("; the shipped ", kind, " are ", list);
  }
  return "";
}

}  // namespace

std::vector<fs::path> shipped_roots(const fs::path& executable) {
  const fs::path dir = executable.parent_path();
  return {dir, dir.parent_path(), dir.parent_path() / "share" / "kestrel"};
}

std::string find_shipped_file(const std::string& given, const std::vector<fs::path>& roots,
                              const std::string& flag) {
  KESTREL_CHECK(!given.empty(), flag, " is empty; give a file name or path");
  if (is_file(given)) return given;
  const fs::path name(given);
  std::string tried = str("'", fs::absolute(name).lexically_normal().string(), "'");
  if (!name.is_absolute()) {
    for (const fs::path& root : roots) {
      const fs::path direct = (root / name).lexically_normal();
      if (is_file(direct)) return direct.string();
      std::vector<fs::path> found;
      for (const char* sub : {"models", "data"}) {
        std::vector<fs::path> m = matches_below(root / sub, name);
        found.insert(found.end(), m.begin(), m.end());
      }
      if (found.size() == 1) return found[0].lexically_normal().string();
      if (found.size() > 1) {
        std::string list;
        for (const fs::path& f : found) list += "\n  " + f.string();
        KESTREL_FAIL(flag, " '", given, "' matches several shipped files; give one of them as a path:",
                     list);
      }
      tried += ", '" + direct.string() + "', '" + (root / "models").lexically_normal().string() +
               "/**', '" + (root / "data").lexically_normal().string() + "/**'";
    }
  }
  KESTREL_FAIL(flag, " '", given, "': no such file (tried ", tried, ")", shipped_choices(roots, flag));
}

std::string find_shipped_file(const std::string& given, const std::string& flag) {
  return find_shipped_file(given, shipped_roots(fs::read_symlink("/proc/self/exe")), flag);
}

}  // namespace kestrel::yolo
