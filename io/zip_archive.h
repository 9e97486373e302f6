// Reading a zip archive held in memory, as far as torch.save writes one: every entry stored
// (method 0, no compression), none encrypted, ZIP64 records where sizes or offsets pass 4 GiB or
// the entry count passes 65535. Dataset archives (coco128.zip) are read with
// ZipMethods::StoredOrDeflated, which also takes deflated entries (method 8); their bytes are
// inflated and checked by io/zip_extract. The central directory is authoritative (it is what readers use);
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
  uint64_t data_offset = 0;  // of the bytes as stored (compressed or not), from the archive's start
  uint64_t size = 0;         // bytes stored in the archive
  uint64_t unpacked_size = 0;  // bytes once inflated (= size for a stored entry)
  uint16_t method = 0;       // 0 stored, 8 deflated
  uint32_t crc = 0;          // CRC-32 of the unpacked bytes
  uint32_t unix_mode = 0;    // st_mode where the archiver was a Unix one (0 otherwise)
};

enum class ZipMethods { Stored, StoredOrDeflated };

class ZipArchive {
 public:
  // `bytes` must outlive the archive: entries are views into it. Stored entries' CRC-32 is
  // checked here; deflated ones' when they are inflated.
  static ZipArchive parse(std::string_view bytes, const std::string& path,
                          ZipMethods methods = ZipMethods::Stored);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }  // in directory order
  const ZipEntry* find(std::string_view name) const;                 // nullptr when absent
  // A stored entry's bytes (throws for a deflated one: io/zip_extract inflates those).
  std::string_view data(const ZipEntry& entry) const;
  // The entry's bytes as they lie in the archive, compressed or not.
  std::string_view raw(const ZipEntry& entry) const { return bytes_.substr(entry.data_offset, entry.size); }

 private:
  std::string_view bytes_;
  std::string path_;
  std::vector<ZipEntry> entries_;
};

// The zip format's checksum (CRC-32, polynomial 0xEDB88320: zlib's crc32). `previous` continues
// a checksum over data given in pieces (0 to start).
uint32_t crc32(std::string_view data, uint32_t previous = 0);

// True when `bytes` start as a zip archive does (a local file header, or an empty archive's end
// record).
bool looks_like_zip(std::string_view bytes);

}  // namespace kestrel
