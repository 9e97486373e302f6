// Running the kestrel binary from a test, as a user would: CLI tests check exit codes and output.
#pragma once
#include <filesystem>
#include <string>

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

}  // namespace kestrel::testing
