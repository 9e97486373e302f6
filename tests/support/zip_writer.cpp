#include "tests/support/zip_writer.h"

#include <zlib.h>

#include <stdexcept>

#include "io/zip_archive.h"

namespace kestrel::testing {
namespace {

void put(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string raw_deflate(const std::string& data) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zip_writer: deflateInit2 failed");
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("zip_writer: deflate did not finish");
  return out;
}

}  // namespace

std::string make_zip(const std::vector<ZipInput>& entries, bool zip64) {
  const uint64_t saturated32 = 0xFFFFFFFF;
  std::string out, directory;
  for (const ZipInput& e : entries) {
    const uint64_t local = out.size();
    const uint32_t crc = crc32(e.data) ^ (e.wrong_crc ? 1u : 0u);
    const std::string stored = e.deflate ? raw_deflate(e.data) : e.data;
    const uint16_t method = e.deflate ? 8 : e.method;
    const uint64_t size = e.declared_size >= 0 ? static_cast<uint64_t>(e.declared_size) : e.data.size();
    // A stored entry's two sizes are one: a declared size applies to both.
    const uint64_t compressed = e.deflate ? stored.size() : size;
    put(out, 0x04034b50, 4);
    put(out, 20, 2);
    put(out, e.flags, 2);
    put(out, method, 2);
    put(out, 0, 4);  // time, date
    put(out, crc, 4);
    put(out, compressed, 4);
    put(out, size, 4);
    put(out, e.name.size(), 2);
    put(out, 0, 2);
    out += e.name + stored;

    std::string extra;
    if (zip64) {
      put(extra, 0x0001, 2);
      put(extra, 24, 2);
      put(extra, size, 8);
      put(extra, compressed, 8);
      put(extra, local, 8);
    }
    const uint16_t made_by = e.unix_mode ? (3 << 8) | 45 : 45;
    put(directory, 0x02014b50, 4);
    put(directory, made_by, 2);
    put(directory, zip64 ? 45 : 20, 2);
    put(directory, e.flags, 2);
    put(directory, method, 2);
    put(directory, 0, 4);
    put(directory, crc, 4);
    put(directory, zip64 ? saturated32 : compressed, 4);
    put(directory, zip64 ? saturated32 : size, 4);
    put(directory, e.name.size(), 2);
    put(directory, extra.size(), 2);
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);
    put(directory, static_cast<uint64_t>(e.unix_mode) << 16, 4);
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
