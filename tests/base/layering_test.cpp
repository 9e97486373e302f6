// The arrows of docs/architecture.md, checked on the sources: every `#include "..."` of a project
// file points to its own layer or one below it, and no header reaches itself through the headers
// it includes. Runs from the source root (ctest's working directory).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// A file's layer: its folder, with yolo/ split into the library, export and the CLI.
std::string layer_of(const std::string& path) {
  for (const char* sub : {"yolo/cli/", "yolo/export/", "yolo/data/"})
    if (path.rfind(sub, 0) == 0) return std::string(sub).substr(0, std::string(sub).size() - 1);
  const size_t slash = path.find('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// What each layer may include besides itself (yolo/data is part of the yolo library).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"base", {}},
    {"kernels", {"base"}},
    {"engine", {"base", "kernels"}},
    {"layers", {"base", "kernels", "engine"}},
    {"dist", {"base", "kernels", "engine"}},
    {"tensorboard", {"base"}},
    {"yolo/data", {"base", "kernels", "engine", "yolo"}},
    {"yolo", {"base", "kernels", "engine", "layers", "dist", "tensorboard", "yolo/data"}},
    {"yolo/export", {"base", "kernels", "engine", "layers", "dist", "tensorboard", "yolo", "yolo/data"}},
    {"yolo/cli", {"base", "kernels", "engine", "layers", "dist", "tensorboard", "yolo", "yolo/data", "yolo/export"}},
};

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cpp" || e == ".cu" || e == ".cuh";
}

// Project includes of every source file in the layered folders, by path from the root.
std::map<std::string, std::vector<std::string>> project_includes() {
  static const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [layer, allowed] : kAllowed) {
    (void)allowed;
    if (layer.find('/') != std::string::npos) continue;  // walked with its parent folder
    for (const auto& entry : fs::recursive_directory_iterator(layer)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string path = entry.path().generic_string();
      std::ifstream in(path);
      std::vector<std::string>& deps = out[path];
      for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, include) && kAllowed.count(layer_of(m[1].str())))
          deps.push_back(m[1].str());
      }
    }
  }
  return out;
}

TEST(Layering, EveryIncludePointsToItsOwnLayerOrBelow) {
  const auto includes = project_includes();
  ASSERT_GT(includes.size(), 300u) << "run from the source root";
  std::vector<std::string> upward;
  for (const auto& [file, deps] : includes) {
    const std::string from = layer_of(file);
    for (const std::string& dep : deps) {
      const std::string to = layer_of(dep);
      if (to != from && !kAllowed.at(from).count(to)) upward.push_back(file + " includes " + dep);
    }
  }
  std::string all;
  for (const std::string& u : upward) all += "\n  " + u;
  EXPECT_TRUE(upward.empty()) << upward.size() << " includes point up or sideways:" << all;
}

TEST(Layering, NoHeaderIncludesItselfThroughOthers) {
  const auto includes = project_includes();
  std::map<std::string, int> state;  // 0 unvisited, 1 on the current path, 2 done
  std::vector<std::string> path, cycles;
  std::function<void(const std::string&)> visit = [&](const std::string& h) {
    state[h] = 1;
    path.push_back(h);
    auto it = includes.find(h);
    if (it != includes.end())
      for (const std::string& dep : it->second) {
        if (state[dep] == 1) {
          std::string cycle;
          for (auto p = std::find(path.begin(), path.end(), dep); p != path.end(); ++p) cycle += *p + " -> ";
          cycles.push_back(cycle + dep);
        } else if (state[dep] == 0) {
          visit(dep);
        }
      }
    path.pop_back();
    state[h] = 2;
  };
  for (const auto& [file, deps] : includes) {
    (void)deps;
    if (state[file] == 0) visit(file);
  }
  std::string all;
  for (const std::string& c : cycles) all += "\n  " + c;
  EXPECT_TRUE(cycles.empty()) << cycles.size() << " include cycles:" << all;
}

}  // namespace
