// Reading a zip archive held in memory, as far as torch.save writes one: every entry stored
// (method 0, no compression), none encrypted, ZIP64 records where sizes or offsets pass 4 GiB or
// the entry count passes 65535. The central directory is authoritative (it is what readers use);
// each entry's local header is checked to sit where the directory says, and its CRC-32 is checked,
// so a damaged file is refused instead of yielding wrong weights. Nothing outside the given bytes
// is ever read; a refusal names the archive, the entry and the problem.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // of the stored bytes, from the start of the archive
  uint64_t size = 0;
};

class ZipArchive {
 public:
  // `bytes` must outlive the archive: entries are views into it.
  static ZipArchive parse(std::string_view bytes, const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }  // in directory order
  const ZipEntry* find(std::string_view name) const;                 // nullptr when absent
  std::string_view data(const ZipEntry& entry) const {
    return bytes_.substr(entry.data_offset, entry.size);
  }

 private:
  std::string_view bytes_;
  std::string path_;
  std::vector<ZipEntry> entries_;
};

// The zip format's checksum (CRC-32, polynomial 0xEDB88320, as zlib's crc32).
uint32_t crc32(std::string_view data);

// True when `bytes` start as a zip archive does (a local file header, or an empty archive's end
// record).
bool looks_like_zip(std::string_view bytes);

}  // namespace kestrel
