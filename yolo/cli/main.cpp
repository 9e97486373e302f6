// kestrel: the one command-line interface.
#include <cstdio>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/openmp_wait.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/common/stop_signal.h"
#include "yolo/common/version.h"

namespace {

void print_overview(FILE* out) {
  std::fprintf(out, "usage: kestrel <command> [flags]\n\ncommands:\n");
  for (const auto* c : kestrel::cli::all_commands()) std::fprintf(out, "  %-8s %s\n", c->name, c->summary);
  std::fprintf(out, "\n`kestrel <command> --help` shows a command's flags; `kestrel --version` what this is.\n");
}

}  // namespace

int main(int argc, char** argv) {
  kestrel::settle_openmp_wait(argv);  // before any thread: libgomp reads it when it loads
  if (argc >= 2 && std::string(argv[1]) == "--version") {
    std::printf("%s", kestrel::yolo::version_text().c_str());
    return 0;
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_overview(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const kestrel::cli::Command* command = nullptr;
  for (const auto* c : kestrel::cli::all_commands())
    if (name == c->name) command = c;
  if (!command) {
    std::fprintf(stderr, "kestrel: unknown command '%s'\n\n", name.c_str());
    print_overview(stderr);
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& a : args) {
    if (!command->subcommands && (a == "--help" || a == "-h")) {
      std::printf("%s", kestrel::cli::command_help(*command).c_str());
      return 0;
    }
  }
  try {
    return command->run(args);
  } catch (const kestrel::yolo::Interrupted& e) {
    std::fprintf(stderr, "kestrel %s: %s\n", command->name, e.what());
    return 128 + e.signal();
  } catch (const kestrel::cli::UsageError& e) {
    std::fprintf(stderr, "kestrel %s: %s\n\n%s", command->name, e.what(), command->usage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel %s: error: %s\n", command->name, e.what());
    return 1;
  }
}
