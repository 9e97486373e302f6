#include "io/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <set>

#include "base/error.h"

namespace kestrel {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndRecord = 0x06054b50;
constexpr uint32_t kZip64EndRecord = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kEndRecordSize = 22, kLocatorSize = 20, kZip64EndSize = 56;
constexpr uint64_t kCentralSize = 46, kLocalSize = 30;

// How refusals name the archive: a .pt as what torch.save writes, a dataset archive plainly.
std::string zip_label(const std::string& path, ZipMethods methods) {
  return methods == ZipMethods::Stored ? str("'", path, "' (a zip archive, as torch.save writes .pt files)")
                                       : str("'", path, "' (a zip archive)");
}

[[noreturn]] void bad_zip(const std::string& label, const std::string& what) { KESTREL_FAIL(label, ": ", what); }

// Little-endian fields at checked offsets.
class Bytes {
 public:
  Bytes(std::string_view bytes, const std::string& label) : b_(bytes), label_(label) {}
  uint64_t size() const { return b_.size(); }
  void need(uint64_t at, uint64_t n, const char* what) const {
    if (at > b_.size() || n > b_.size() - at)
      bad_zip(label_, str(what, " at byte ", at, " reaches past the end of the ", b_.size(),
                         "-byte file: truncated or damaged"));
  }
  uint64_t le(uint64_t at, int width) const {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b_[at + i]);
    return v;
  }
  std::string_view view(uint64_t at, uint64_t n) const { return b_.substr(at, n); }

 private:
  std::string_view b_;
  const std::string& label_;
};

// The directory's position and size, from the end record (and its ZIP64 twin where the 32-bit
// fields are saturated).
struct Directory {
  uint64_t offset = 0, size = 0, count = 0;
};

Directory find_directory(const Bytes& b, const std::string& label) {
  if (b.size() < kEndRecordSize) bad_zip(label, "too short to hold a zip end record");
  // The end record sits at the end, followed by a comment of at most 65535 bytes.
  uint64_t at = b.size() - kEndRecordSize;
  const uint64_t lowest = at > 65535 ? at - 65535 : 0;
  while (b.le(at, 4) != kEndRecord) {
    if (at == lowest) bad_zip(label, "no end-of-central-directory record: truncated or not a zip archive");
    --at;
  }
  Directory d{b.le(at + 16, 4), b.le(at + 12, 4), b.le(at + 10, 2)};
  if (b.le(at + 4, 2) != 0 || b.le(at + 6, 2) != 0)
    bad_zip(label, "it spans several disks (a split archive); join the parts into one file");
  const bool zip64 = d.offset == 0xFFFFFFFF || d.size == 0xFFFFFFFF || d.count == 0xFFFF;
  if (!zip64) return d;
  if (at < kLocatorSize || b.le(at - kLocatorSize, 4) != kZip64Locator)
    bad_zip(label, "its end record needs a ZIP64 record, but there is no ZIP64 locator before it");
  const uint64_t record = b.le(at - kLocatorSize + 8, 8);
  b.need(record, kZip64EndSize, "the ZIP64 end record");
  if (b.le(record, 4) != kZip64EndRecord) bad_zip(label, "the ZIP64 locator points to no ZIP64 end record");
  return {b.le(record + 48, 8), b.le(record + 40, 8), b.le(record + 32, 8)};
}

// Reads the 64-bit values a ZIP64 extra field holds for the saturated 32-bit ones, in the
// order the format fixes: uncompressed size, compressed size, local header offset.
void read_zip64_extra(const Bytes& b, uint64_t extra, uint64_t extra_len, uint64_t& size,
                      uint64_t& compressed, uint64_t& local, const std::string& label,
                      const std::string& name) {
  for (uint64_t at = extra; at + 4 <= extra + extra_len;) {
    const uint64_t id = b.le(at, 2), len = b.le(at + 2, 2);
    if (at + 4 + len > extra + extra_len) break;
    if (id == kZip64ExtraId) {
      uint64_t p = at + 4;
      for (uint64_t* field : {&size, &compressed, &local}) {
        if (*field != 0xFFFFFFFF) continue;
        if (p + 8 > at + 4 + len) bad_zip(label, str("entry '", name, "': its ZIP64 extra field is too short"));
        *field = b.le(p, 8);
        p += 8;
      }
      return;
    }
    at += 4 + len;
  }
  if (size == 0xFFFFFFFF || compressed == 0xFFFFFFFF || local == 0xFFFFFFFF)
    bad_zip(label, str("entry '", name, "' needs a ZIP64 extra field and has none"));
}

}  // namespace

uint32_t crc32(std::string_view data, uint32_t previous) {
  uLong c = previous;
  // zlib takes 32-bit lengths: a larger piece goes in slices.
  for (size_t at = 0; at < data.size();) {
    const size_t n = std::min<size_t>(data.size() - at, size_t{1} << 30);
    c = ::crc32(c, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(c);
}

bool looks_like_zip(std::string_view bytes) {
  return bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' &&
         ((bytes[2] == 3 && bytes[3] == 4) || (bytes[2] == 5 && bytes[3] == 6));
}

ZipArchive ZipArchive::parse(std::string_view bytes, const std::string& path, ZipMethods methods) {
  const std::string label = zip_label(path, methods);
  const Bytes b(bytes, label);
  const Directory dir = find_directory(b, label);
  b.need(dir.offset, dir.size, "the central directory");
  // Each directory entry takes at least 46 bytes: a count that cannot fit is refused before any
  // allocation of its size.
  if (dir.count > dir.size / kCentralSize)
    bad_zip(label, str("the end record counts ", dir.count, " entries, more than its ", dir.size,
                      "-byte directory can hold"));
  ZipArchive out;
  out.bytes_ = bytes;
  out.path_ = path;
  std::set<std::string> names;
  uint64_t at = dir.offset;
  const uint64_t end = dir.offset + dir.size;
  for (uint64_t i = 0; i < dir.count; ++i) {
    if (at + kCentralSize > end || b.le(at, 4) != kCentralHeader)
      bad_zip(label, str("central directory entry ", i, " of ", dir.count, " is missing or damaged"));
    const uint64_t made_by = b.le(at + 4, 2), flags = b.le(at + 8, 2), method = b.le(at + 10, 2);
    const uint64_t crc = b.le(at + 16, 4), external = b.le(at + 38, 4);
    uint64_t compressed = b.le(at + 20, 4), size = b.le(at + 24, 4), local = b.le(at + 42, 4);
    const uint64_t name_len = b.le(at + 28, 2), extra_len = b.le(at + 30, 2), comment_len = b.le(at + 32, 2);
    if (at + kCentralSize + name_len + extra_len + comment_len > end)
      bad_zip(label, str("central directory entry ", i, " reaches past the directory's end"));
    ZipEntry e;
    e.name = std::string(b.view(at + kCentralSize, name_len));
    read_zip64_extra(b, at + kCentralSize + name_len, extra_len, size, compressed, local, label, e.name);
    if (flags & 1)
      bad_zip(label, str("entry '", e.name, "' is encrypted; Kestrel reads only unencrypted archives",
                        methods == ZipMethods::Stored ? " (as torch.save writes them)" : "", ": decrypt it first"));
    const bool deflated = method == 8 && methods == ZipMethods::StoredOrDeflated;
    if (methods == ZipMethods::Stored && (method != 0 || compressed != size))
      bad_zip(label, str("entry '", e.name, "' is compressed (method ", method, "); torch.save ",
                        "stores entries uncompressed: the file was re-zipped by another tool, so ",
                        "re-save it with torch.save or unzip and re-zip it with `zip -0`"));
    if (!deflated && method != 0)
      bad_zip(label, str("entry '", e.name, "' uses compression method ", method, ", which Kestrel ",
                        "does not unpack (it reads stored and deflated entries); unpack it with ",
                        "another tool, or re-zip it with plain `zip`"));
    if (method == 0 && compressed != size)
      bad_zip(label, str("entry '", e.name, "' is stored uncompressed, yet its sizes differ (", compressed,
                        " and ", size, " bytes): the archive is damaged"));
    b.need(local, kLocalSize, str("entry '", e.name, "': its local header").c_str());
    if (b.le(local, 4) != kLocalHeader)
      bad_zip(label, str("entry '", e.name, "': no local header where the directory says (byte ", local, ")"));
    e.data_offset = local + kLocalSize + b.le(local + 26, 2) + b.le(local + 28, 2);
    e.size = compressed;
    e.unpacked_size = size;
    e.method = static_cast<uint16_t>(method);
    e.crc = static_cast<uint32_t>(crc);
    e.unix_mode = (made_by >> 8) == 3 ? static_cast<uint32_t>(external >> 16) : 0;
    b.need(e.data_offset, e.size, str("entry '", e.name, "': its data").c_str());
    if (method == 0 && crc32(b.view(e.data_offset, e.size)) != crc)
      bad_zip(label, str("entry '", e.name, "' fails its CRC-32 check: the file is damaged; ",
                        "download or copy it again"));
    out.entries_.push_back(std::move(e));
    if (!names.insert(out.entries_.back().name).second)
      bad_zip(label, str("the entry name '", out.entries_.back().name, "' appears twice"));
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  return out;
}

std::string_view ZipArchive::data(const ZipEntry& entry) const {
  if (entry.method != 0)
    bad_zip(zip_label(path_, ZipMethods::Stored), str("entry '", entry.name, "' is deflated: inflate it (io/zip_extract) to read it"));
  return raw(entry);
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  for (const ZipEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace kestrel
