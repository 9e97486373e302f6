// Running the kestrel binary from a test, as a user would: CLI tests check exit codes and output.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace kestrel::testing {

// The kestrel binary built beside the test binary.
std::filesystem::path kestrel_binary();

struct CliResult {
  int code;         // exit status; -1 when killed by a signal
  std::string out;  // stdout and stderr together
};

// Runs `kestrel <args>` through the shell (args are not quoted) and waits for it.
CliResult run_kestrel(const std::string& args);
// The same, from the working directory `dir`.
CliResult run_kestrel_in(const std::filesystem::path& dir, const std::string& args);

// Runs a shell command line, stdout and stderr together, and waits for it.
CliResult run_command(const std::string& command);

// The first of $KESTREL_PYTHON, python3 (from PATH) and /usr/bin/python3 that imports every one
// of `modules`; empty when none does (tests then skip, naming what is missing).
std::string find_python(const std::vector<std::string>& modules);

}  // namespace kestrel::testing
