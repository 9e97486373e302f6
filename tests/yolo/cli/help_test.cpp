// `kestrel <command> --help` describes every flag the command takes, one line each: the test reads
// each command's flag table (the one list its parser, --help and start-up echo come from) and
// finds every flag in the binary's --help output with a description after it.
#include "yolo/cli/commands.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>
#include <sstream>
#include <string>

#include "tests/support/cli.h"

using kestrel::cli::all_commands;
using kestrel::cli::Command;
using kestrel::cli::Flag;

namespace {

// The description on the --help line of `--name`, after its placeholder; "" when no line has it.
std::string description_of(const std::string& help, const Flag& flag) {
  const std::string head = std::string("  --") + flag.name + (flag.value ? std::string(" ") + flag.value : "") + "  ";
  std::istringstream lines(help.substr(help.find("\nflags:\n") == std::string::npos ? help.size() : help.find("\nflags:\n")));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(head, 0) == 0) return line.substr(line.find_first_not_of(' ', head.size()));
  return "";
}

}  // namespace

TEST(Help, EveryFlagOfEveryCommandHasAOneLineDescription) {
  ASSERT_FALSE(all_commands().empty());
  // A family's subcommands stand in for it (`kestrel classify train --help`).
  std::vector<std::pair<std::string, const Command*>> commands;
  for (const Command* c : all_commands()) {
    if (!c->subcommands) commands.emplace_back(c->name, c);
    else
      for (const Command* sub : *c->subcommands) commands.emplace_back(std::string(c->name) + " " + sub->name, sub);
  }
  for (const auto& [invocation, c] : commands) {
    ASSERT_NE(c->flags, nullptr) << invocation;
    const auto r = kestrel::testing::run_kestrel(invocation + " --help");
    ASSERT_EQ(r.code, 0) << c->name << ": " << r.out;
    std::set<std::string> seen;
    for (const Flag& f : *c->flags) {
      EXPECT_TRUE(seen.insert(f.name).second) << c->name << ": --" << f.name << " twice";
      ASSERT_NE(f.help, nullptr) << c->name << " --" << f.name;
      EXPECT_EQ(std::string(f.help).find('\n'), std::string::npos) << c->name << " --" << f.name << ": one line";
      const std::string d = description_of(r.out, f);
      EXPECT_GE(d.size(), 8u) << c->name << " --" << f.name << " has no description in:\n" << r.out;
    }
    // Every flag the parser takes is in the table: the spec is made from it.
    EXPECT_EQ(kestrel::cli::flag_spec(*c->flags).size(), c->flags->size()) << c->name;
  }
}

TEST(Help, DefaultsAreShownAndUnknownFlagsRefused) {
  const auto r = kestrel::testing::run_kestrel("val --help");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("  --conf-thres C"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("confidence threshold (default 0.001)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  --save-txt  "), std::string::npos) << r.out;  // a switch has no placeholder
  // A flag the table lacks is refused (exit 2), as before.
  EXPECT_EQ(kestrel::testing::run_kestrel("val --weights w --no-such-flag").code, 2);
}
