// Any file given to --weights is read or refused with kestrel::Error saying what it is (a format
// Kestrel reads, another runtime's export, text, an image, an empty or cut-short file): never a
// crash or another exception, whatever its bytes.
#include <string>

#include "base/error.h"
#include "fuzz/targets.h"
#include "yolo/model/weights_file.h"

namespace kestrel::fuzz {

void weights_file(std::string_view input) {
  try {
    yolo::parse_weights_file(std::string(input), "fuzz.bin");
  } catch (const Error& e) {
    require(*e.what() != '\0', "an empty refusal");
  }
}

}  // namespace kestrel::fuzz
