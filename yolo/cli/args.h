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

namespace kestrel::cli {

// A wrong command line: main() prints the message and the command's usage, and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The largest --img-size a command accepts, 8192 pixels a side (12.8x the reference's default
// 640): one letterboxed image is then 200 MB, a training mosaic canvas 800 MB. Beyond it a value
// is a typing error that would otherwise fail deep inside an allocation.
constexpr int kMaxImageSize = 8192;

class Args {
 public:
  // spec: flag name (without dashes) -> true if it takes a value. Dashes and underscores in
  // given names are interchangeable (--img-size, --img_size), and a unique prefix names its flag
  // (--batch for --batch-size), as argparse allows in the reference.
  // Flags named in `lists` take one or more values, as argparse's nargs='+' (--classes 0 2 3):
  // the words up to the next flag, kept joined by commas (so --classes 0,2,3 reads the same).
  Args(const std::vector<std::string>& argv, const std::map<std::string, bool>& spec,
       const std::set<std::string>& lists = {});

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

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace kestrel::cli
