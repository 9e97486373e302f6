// Builds zip archives in memory for the readers' tests: stored entries as torch.save writes them,
// deflated ones as dataset archives hold them, with knobs to write what a good archive never does
// (a method Kestrel does not read, encryption, a wrong CRC or size, links), so every refusal can be
// seen.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::testing {

struct ZipInput {
  std::string name;
  std::string data;
  uint16_t method = 0;       // written as given, with the data as given (8 claims deflate)
  uint16_t flags = 0;        // bit 0 = encrypted
  bool wrong_crc = false;
  bool deflate = false;      // compress the data with zlib (raw deflate) and write method 8
  int64_t declared_size = -1;  // the unpacked size the headers claim (-1: the data's own)
  uint32_t unix_mode = 0;    // st_mode in the external attributes, made by Unix (0: none)
};

// A whole archive: local headers and data, central directory, end record. With `zip64` every
// entry's sizes and offset go to a ZIP64 extra field and the end record to a ZIP64 one.
std::string make_zip(const std::vector<ZipInput>& entries, bool zip64 = false);

}  // namespace kestrel::testing
