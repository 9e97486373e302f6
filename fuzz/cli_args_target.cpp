// Command lines (arguments separated by NUL bytes) against a spec shaped like the commands':
// flags with and without values, and names that are prefixes of others. A bad command line is a
// cli::UsageError; every flag a parse accepted reads back or is refused the same way.
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "fuzz/targets.h"
#include "yolo/cli/args.h"

namespace kestrel::fuzz {
namespace {

const std::map<std::string, bool> kSpec = {
    {"img", true},        {"img-size", true}, {"imgsz", true},   {"batch-size", true},
    {"resume", false},    {"resume-from", true}, {"rect", false}, {"exist-ok", false},
    {"lr", true},         {"name", true},     {"seed", true}};

std::vector<std::string> split_arguments(std::string_view input) {
  std::vector<std::string> argv;
  size_t start = 0;
  for (size_t i = 0; i <= input.size(); ++i)
    if (i == input.size() || input[i] == '\0') {
      argv.emplace_back(input.substr(start, i - start));
      start = i + 1;
    }
  return argv;
}

void read_each_flag(const cli::Args& args) {
  for (const auto& [name, takes_value] : kSpec) {
    if (!args.has(name)) {
      require(args.get(name, "fallback") == "fallback", "an absent flag has a value");
      continue;
    }
    try {
      const int value = args.get_int32(name, 0);
      require(args.get_int(name, 0) == value, "int32 and int64 reads disagree");
    } catch (const cli::UsageError&) {
    }
    try {
      args.get_double(name, 0.0);
    } catch (const cli::UsageError&) {
    }
  }
}

}  // namespace

void cli_args(std::string_view input) {
  try {
    read_each_flag(cli::Args(split_arguments(input), kSpec));
  } catch (const cli::UsageError&) {
  }
}

}  // namespace kestrel::fuzz
