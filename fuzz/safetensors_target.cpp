// A safetensors file is refused with kestrel::Error or loaded so that every tensor Kestrel has a
// type for reads back exactly its bytes of the data section, and no other.
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "engine/safetensors_tensors.h"
#include "fuzz/targets.h"

namespace kestrel::fuzz {

void safetensors(std::string_view input) {
  SafetensorsFile file;
  try {
    file = parse_safetensors(input, "fuzz.safetensors");
  } catch (const Error&) {
    return;
  }
  uint64_t header = 0;  // a loaded file has its 8-byte little-endian header length
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<uint8_t>(input[i]);
  const std::string_view data = input.substr(8 + header);
  for (const std::string& name : file.names()) {
    const SafetensorsEntry& e = file.entry(name);
    require(e.begin <= e.end && e.end <= data.size(), "an entry reaches past the data section");
    Tensor t;
    try {
      t = safetensors_tensor(file, name);
    } catch (const Error&) {
      continue;  // a dtype Kestrel has no tensor type for, or too many dimensions
    }
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    require(nbytes == e.end - e.begin, "a tensor's size differs from its data_offsets");
    require(nbytes == 0 || std::memcmp(t.data_ptr(), data.data() + e.begin, nbytes) == 0,
            "a tensor's values differ from its bytes in the file");
  }
}

}  // namespace kestrel::fuzz
