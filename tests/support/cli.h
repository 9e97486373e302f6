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

// A training run's results.csv: its rows (the header skipped), each cell as a number; empty when
// the file is missing.
std::vector<std::vector<double>> read_results_csv(const std::filesystem::path& csv);

// The first of $KESTREL_PYTHON, python3 (from PATH) and /usr/bin/python3 that imports every one
// of `modules`; empty when none does (tests then skip, naming what is missing).
std::string find_python(const std::vector<std::string>& modules);

// What a test that runs the reference needs: a Python importing the modules it names, and the
// reference's v7.0 source tree ($KESTREL_REFERENCE_DIR, default /tmp/yolov5).
struct Reference {
  std::string python, dir;
};
// Fills `ref`, or returns why the test cannot run (to skip with): no such Python, or no tree
// holding `marker` (a file of it, e.g. "train.py"). Empty when the test can run.
std::string find_reference(Reference& ref, const std::vector<std::string>& modules, const std::string& marker);
// Runs `ref.python <script_and_args>` with $KESTREL_REFERENCE_DIR set to ref.dir.
CliResult run_reference_python(const Reference& ref, const std::string& script_and_args);

}  // namespace kestrel::testing
