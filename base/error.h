// kestrel::Error and the checking macros every layer uses. Messages say what failed, where, and
// what to do about it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kestrel {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates anything streamable: str("got ", n, " dims").
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

}  // namespace kestrel

// KESTREL_CHECK(cond, "what went wrong", value, "how to fix it");
#define KESTREL_CHECK(cond, ...)                                                   \
  do {                                                                             \
    if (!(cond)) ::kestrel::throw_error(__FILE__, __LINE__, ::kestrel::str(__VA_ARGS__)); \
  } while (0)

#define KESTREL_FAIL(...) ::kestrel::throw_error(__FILE__, __LINE__, ::kestrel::str(__VA_ARGS__))
