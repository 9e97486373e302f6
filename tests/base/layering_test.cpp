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

// A file's layer: its folder, and under yolo/ its second folder (yolo/model, yolo/train, ...).
std::string layer_of(const std::string& path) {
  const size_t slash = path.find('/');
  if (slash == std::string::npos) return "";
  const std::string top = path.substr(0, slash);
  if (top != "yolo") return top;
  const size_t second = path.find('/', slash + 1);
  return second == std::string::npos ? path : path.substr(0, second);  // a file directly in yolo/ is its own layer
}

// What each layer may include besides itself, lowest first: the arrows of docs/architecture.md.
// Inside yolo/ the folders are stacked in the same way: a task adds its files to these folders.
const std::vector<std::string> kLibraries = {"base", "kernels", "io", "engine", "layers", "dist", "tensorboard"};
const std::vector<std::string> kYoloStack = {"yolo/common", "yolo/data",  "yolo/model",  "yolo/plot",
                                             "yolo/eval",   "yolo/train", "yolo/export", "yolo/cli"};

std::map<std::string, std::set<std::string>> allowed_layers() {
  std::map<std::string, std::set<std::string>> allowed = {
      {"base", {}},
      {"kernels", {"base"}},
      {"io", {"base"}},
      {"engine", {"base", "kernels", "io"}},
      {"layers", {"base", "kernels", "io", "engine"}},
      {"dist", {"base", "kernels", "io", "engine"}},
      {"tensorboard", {"base"}},
  };
  std::set<std::string> below(kLibraries.begin(), kLibraries.end());
  for (const std::string& folder : kYoloStack) {
    allowed[folder] = below;
    below.insert(folder);
  }
  return allowed;
}
const std::map<std::string, std::set<std::string>> kAllowed = allowed_layers();

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cpp" || e == ".cu" || e == ".cuh";
}

// Project includes of every source file in the layered folders, by path from the root.
std::map<std::string, std::vector<std::string>> project_includes() {
  static const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::map<std::string, std::vector<std::string>> out;
  std::vector<std::string> roots = kLibraries;
  roots.push_back("yolo");
  for (const std::string& root : roots) {
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string path = entry.path().generic_string();
      std::ifstream in(path);
      std::vector<std::string>& deps = out[path];
      for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, include) && (kAllowed.count(layer_of(m[1].str())) || m[1].str().rfind("yolo/", 0) == 0))
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
    if (!kAllowed.count(from)) {
      upward.push_back(file + " is in no layer: put it in one of yolo/'s folders");
      continue;
    }
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
