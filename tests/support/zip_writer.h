// Builds zip archives in memory for the readers' tests: stored entries as torch.save writes them,
// with knobs to write what torch.save never does (ZIP64 records, compression, encryption, a wrong
// CRC), so every refusal can be seen.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::testing {

struct ZipInput {
  std::string name;
  std::string data;
  uint16_t method = 0;       // 8 = deflate (the data is written as given)
  uint16_t flags = 0;        // bit 0 = encrypted
  bool wrong_crc = false;
};

// A whole archive: local headers and data, central directory, end record. With `zip64` every
// entry's sizes and offset go to a ZIP64 extra field and the end record to a ZIP64 one.
std::string make_zip(const std::vector<ZipInput>& entries, bool zip64 = false);

}  // namespace kestrel::testing
