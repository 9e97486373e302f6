// A JSON document is refused with kestrel::Error or parsed into a value that writes back out
// (its strings are UTF-8, its numbers finite) and reads back to the same value.
#include <string>

#include "base/error.h"
#include "fuzz/targets.h"
#include "io/json.h"

namespace kestrel::fuzz {

void json(std::string_view input) {
  kestrel::json::Value value;
  try {
    value = kestrel::json::parse(input);
  } catch (const Error&) {
    return;
  }
  require(kestrel::json::valid_utf8(input), "a document that is not UTF-8 was accepted");
  const std::string text = kestrel::json::dump(value);
  require(kestrel::json::dump(kestrel::json::parse(text)) == text, "dump and parse disagree");
}

}  // namespace kestrel::fuzz
