// libFuzzer's entry point for one target, chosen at compile time (fuzz/CMakeLists.txt builds one
// executable per target with KESTREL_FUZZ_TARGET set to its name).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kestrel::fuzz::KESTREL_FUZZ_TARGET(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
