#include "yolo/cli/args.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kestrel::cli {
namespace {

std::string canonical(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// The reference's spellings of one option (its argparse gives --imgsz, --img and --img-size to
// one destination): a command that declares the target accepts each, and their prefixes, as it.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table = {{"img", "img-size"}, {"imgsz", "img-size"}};
  return table;
}

// `name` itself, or the flag it is another spelling of where the command declares that flag.
std::string resolve_alias(const std::string& name, const std::map<std::string, bool>& spec) {
  const auto a = aliases().find(name);
  return a != aliases().end() && spec.count(a->second) ? a->second : name;
}

}  // namespace

Args::Args(const std::vector<std::string>& argv, const std::map<std::string, bool>& spec,
           const std::set<std::string>& lists) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      throw UsageError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    name = canonical(name);
    if (!spec.count(resolve_alias(name, spec))) {  // argparse's abbreviations: a unique prefix names its flag
      std::set<std::string> matches;
      for (const auto& [flag, takes_value] : spec)
        if (flag.rfind(name, 0) == 0) matches.insert(resolve_alias(flag, spec));
      for (const auto& [alias, target] : aliases())
        if (alias.rfind(name, 0) == 0 && spec.count(target)) matches.insert(target);
      if (matches.empty()) throw UsageError("unknown flag --" + name);
      if (matches.size() > 1) {
        std::string list;
        for (const std::string& m : matches) list += (list.empty() ? "--" : ", --") + m;
        throw UsageError("ambiguous flag --" + name + ": could be " + list);
      }
      name = *matches.begin();
    }
    name = resolve_alias(name, spec);
    const auto it = spec.find(name);
    if (it == spec.end()) throw UsageError("unknown flag --" + name);
    if (values_.count(name)) throw UsageError("--" + name + " given twice");
    if (it->second && !inline_value) {
      if (i + 1 >= argv.size()) throw UsageError("--" + name + " needs a value");
      value = argv[++i];
      while (lists.count(name) && i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0)
        value += "," + argv[++i];
    } else if (!it->second && inline_value) {
      throw UsageError("--" + name + " takes no value");
    }
    values_[name] = value;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto v = get_optional_int(name);
  return v ? *v : fallback;
}

int Args::get_int32(const std::string& name, int fallback) const {
  auto v = get_optional_int32(name);
  return v ? *v : fallback;
}

std::optional<int> Args::get_optional_int32(const std::string& name) const {
  const std::optional<int64_t> v = get_optional_int(name);
  if (!v) return std::nullopt;
  if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())
    throw UsageError("--" + name + " " + std::to_string(*v) + " is out of range (at most " +
                     std::to_string(std::numeric_limits<int>::max()) + ")");
  return static_cast<int>(*v);
}

std::optional<int64_t> Args::get_optional_int(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + name + " expects an integer, got '" + it->second + "'");
}

std::vector<int> Args::get_int_list(const std::string& name) const {
  std::vector<int> out;
  const std::string text = get(name, "");
  if (!has(name)) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size())
      throw UsageError("--" + name + " expects integers like 0 or 0 2 3, got '" + text + "'");
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      throw UsageError("--" + name + " " + part + " is out of range (at most " +
                       std::to_string(std::numeric_limits<int>::max()) + ")");
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

double Args::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    double v = std::stod(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + name + " expects a number, got '" + it->second + "'");
}

}  // namespace kestrel::cli
