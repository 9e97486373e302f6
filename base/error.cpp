#include "base/error.h"

#include <cstring>

namespace kestrel {

void throw_error(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(str(message, " [", base ? base + 1 : file, ":", line, "]"));
}

}  // namespace kestrel
