#include "tests/support/cli.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

namespace kestrel::testing {

std::vector<std::vector<double>> read_results_csv(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) row.push_back(std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

std::filesystem::path kestrel_binary() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "kestrel";
}

CliResult run_kestrel(const std::string& args) { return run_command(kestrel_binary().string() + " " + args); }

CliResult run_kestrel_in(const std::filesystem::path& dir, const std::string& args) {
  return run_command("cd '" + dir.string() + "' && " + kestrel_binary().string() + " " + args);
}

CliResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string find_python(const std::vector<std::string>& modules) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KESTREL_PYTHON"); env && *env) candidates.push_back(env);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  std::string imports = "import sys";
  for (const std::string& m : modules) imports += "; import " + m;
  for (const std::string& python : candidates)
    // From /, so that a source folder of the same name (tensorboard/) does not pass for the package.
    if (run_command("cd / && " + python + " -c '" + imports + "' > /dev/null").code == 0) return python;
  return "";
}

std::string find_reference(Reference& ref, const std::vector<std::string>& modules, const std::string& marker) {
  ref.python = find_python(modules);
  if (ref.python.empty()) {
    std::string names;
    for (const std::string& m : modules) names += (names.empty() ? "" : ", ") + m;
    return "no Python that imports " + names + " (tried $KESTREL_PYTHON, python3, /usr/bin/python3)";
  }
  const char* env = std::getenv("KESTREL_REFERENCE_DIR");
  ref.dir = env && *env ? env : "/tmp/yolov5";
  if (!std::filesystem::exists(std::filesystem::path(ref.dir) / marker))
    return "no YOLOv5 v7.0 source tree at " + ref.dir + " (set KESTREL_REFERENCE_DIR)";
  return "";
}

CliResult run_reference_python(const Reference& ref, const std::string& script_and_args) {
  return run_command("KESTREL_REFERENCE_DIR=" + ref.dir + " " + ref.python + " " + script_and_args);
}

}  // namespace kestrel::testing
