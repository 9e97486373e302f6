#include "tests/support/cli.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <memory>

namespace kestrel::testing {

std::filesystem::path kestrel_binary() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "kestrel";
}

CliResult run_kestrel(const std::string& args) { return run_kestrel_in(".", args); }

CliResult run_kestrel_in(const std::filesystem::path& dir, const std::string& args) {
  const std::string cmd = "cd '" + dir.string() + "' && " + kestrel_binary().string() + " " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace kestrel::testing
