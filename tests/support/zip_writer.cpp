#include "tests/support/zip_writer.h"

#include "engine/zip_archive.h"

namespace kestrel::testing {
namespace {

void put(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string make_zip(const std::vector<ZipInput>& entries, bool zip64) {
  const uint64_t saturated32 = 0xFFFFFFFF;
  std::string out, directory;
  for (const ZipInput& e : entries) {
    const uint64_t local = out.size();
    const uint32_t crc = crc32(e.data) ^ (e.wrong_crc ? 1u : 0u);
    put(out, 0x04034b50, 4);
    put(out, 20, 2);
    put(out, e.flags, 2);
    put(out, e.method, 2);
    put(out, 0, 4);  // time, date
    put(out, crc, 4);
    put(out, e.data.size(), 4);
    put(out, e.data.size(), 4);
    put(out, e.name.size(), 2);
    put(out, 0, 2);
    out += e.name + e.data;

    std::string extra;
    if (zip64) {
      put(extra, 0x0001, 2);
      put(extra, 24, 2);
      put(extra, e.data.size(), 8);
      put(extra, e.data.size(), 8);
      put(extra, local, 8);
    }
    put(directory, 0x02014b50, 4);
    put(directory, 45, 2);
    put(directory, zip64 ? 45 : 20, 2);
    put(directory, e.flags, 2);
    put(directory, e.method, 2);
    put(directory, 0, 4);
    put(directory, crc, 4);
    put(directory, zip64 ? saturated32 : e.data.size(), 4);
    put(directory, zip64 ? saturated32 : e.data.size(), 4);
    put(directory, e.name.size(), 2);
    put(directory, extra.size(), 2);
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, zip64 ? saturated32 : local, 4);
    directory += e.name + extra;
  }
  const uint64_t dir_offset = out.size();
  out += directory;
  if (zip64) {
    const uint64_t record = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, entries.size(), 8);
    put(out, entries.size(), 8);
    put(out, directory.size(), 8);
    put(out, dir_offset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, record, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 4);
  put(out, zip64 ? 0xFFFF : entries.size(), 2);
  put(out, zip64 ? 0xFFFF : entries.size(), 2);
  put(out, zip64 ? saturated32 : directory.size(), 4);
  put(out, zip64 ? saturated32 : dir_offset, 4);
  put(out, 0, 2);
  return out;
}

}  // namespace kestrel::testing
