// Command-line flags in the reference's style: --name value, --name=value, boolean --flag.
// Every flag a command accepts is declared; anything else is a usage error (exit status 2).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "yolo/common/limits.h"

namespace kestrel::cli {

// A wrong command line: main() prints the message and the command's usage, and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The largest --img-size a command accepts (yolo/common/limits.h).
using yolo::kMaxImageSize;

// One flag of a command: its name (no dashes), the placeholder of its value (nullptr: a switch,
// which takes none), the value the command uses when the flag is absent (nullptr: none, Python's
// None in the start-up echo), and its one-line description for --help. A command's table is the
// one list of its flags: the parser's spec, its --help and its echo all come from it.
struct Flag {
  const char* name;
  const char* value;
  const char* fallback;
  const char* help;
};
using FlagTable = std::vector<Flag>;

// The parser's spec of a table: name -> takes a value.
std::map<std::string, bool> flag_spec(const FlagTable& flags);
// "  --name VALUE  description (default X)", one line per flag, the descriptions in one column.
std::string flags_help(const FlagTable& flags);

class Args {
 public:
  // spec: flag name (without dashes) -> true if it takes a value. Dashes and underscores in
  // given names are interchangeable (--img-size, --img_size), and a unique prefix names its flag
  // (--batch for --batch-size), as argparse allows in the reference.
  // Flags named in `lists` take one or more values, as argparse's nargs='+' (--classes 0 2 3):
  // the words up to the next flag, kept joined by commas (so --classes 0,2,3 reads the same).
  // Flags named in `own` are Kestrel's, not the reference's: a prefix that names one of them and
  // exactly one of the reference's flags names the reference's, as the reference's argparse, which
  // knows only its own, reads it (val --n is --name, though val also takes --nc).
  Args(const std::vector<std::string>& argv, const std::map<std::string, bool>& spec,
       const std::set<std::string>& lists = {}, const std::set<std::string>& own = {});

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  // As get_int, for values stored in an int: one outside [INT_MIN, INT_MAX] is a usage error,
  // never wrapped around (--batch-size 4294967304 would otherwise become 8).
  int get_int32(const std::string& name, int fallback) const;
  double get_double(const std::string& name, double fallback) const;
  std::optional<int64_t> get_optional_int(const std::string& name) const;
  std::optional<int> get_optional_int32(const std::string& name) const;
  // A list flag's integers (empty when the flag is absent); anything else is a usage error.
  std::vector<int> get_int_list(const std::string& name) const;
  // The reference's print_args body for these flags: "key=value, ..." with each flag under its
  // Python name (--img-size as imgsz, dashes as underscores), as given or its fallback; switches as
  // True/False, absent flags without a fallback as None, `lists` as Python lists (a single --img-size
  // of a list flag as [s, s], as the reference's detect expands it).
  std::string echo(const FlagTable& flags, const std::set<std::string>& lists = {}) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace kestrel::cli
