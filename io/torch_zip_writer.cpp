#include "io/torch_zip_writer.h"

#include <zlib.h>

#include "base/error.h"

namespace kestrel {
namespace {

constexpr uint64_t kMax32 = 0xFFFFFFFF;
constexpr uint16_t kUtf8Names = 0x0800;  // general purpose flag bit 11
constexpr uint16_t kVersionNeeded = 20;
constexpr uint16_t kPaddingField = 0x4246;  // "FB", the extra field torch pads with

uint32_t crc_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < bytes.size();) {  // crc32 takes at most uInt bytes at once
    const size_t n = std::min<size_t>(bytes.size() - at, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

TorchZipWriter::TorchZipWriter(std::string path, std::string archive_name)
    : file_(std::move(path)), archive_(std::move(archive_name)) {
  KESTREL_CHECK(!archive_.empty() && archive_.find('/') == std::string::npos, "torch zip writer: the folder name '",
                archive_, "' must be one non-empty path component");
}

void TorchZipWriter::put(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void TorchZipWriter::write_pickle(std::string_view data_pkl) {
  add("data.pkl", data_pkl);
  add("byteorder", "little");
}

void TorchZipWriter::add(const std::string& name, std::string_view bytes) {
  const std::string full = archive_ + "/" + name;
  KESTREL_CHECK(bytes.size() < kMax32 && offset_ < kMax32, "torch zip writer: entry ", full, " passes 4 GiB; ",
                "Kestrel writes checkpoints of up to 4 GiB (no ZIP64)");
  KESTREL_CHECK(entries_.size() < 0xFFFF, "torch zip writer: more than 65534 entries");
  for (const Entry& e : entries_) KESTREL_CHECK(e.name != full, "torch zip writer: entry ", full, " added twice");
  if (name == "version") has_version_ = true;
  const uint32_t crc = crc_of(bytes);
  // The data starts after the 30-byte header, the name and the padding field (4 bytes + padding).
  const uint64_t unpadded = offset_ + 30 + full.size() + 4;
  const uint64_t padding = (kTorchZipAlignment - unpadded % kTorchZipAlignment) % kTorchZipAlignment;
  std::string header;
  put(header, 0x04034b50, 4);
  put(header, kVersionNeeded, 2);
  put(header, kUtf8Names, 2);
  put(header, 0, 2);  // stored
  put(header, 0, 4);  // time, date
  put(header, crc, 4);
  put(header, bytes.size(), 4);
  put(header, bytes.size(), 4);
  put(header, full.size(), 2);
  put(header, 4 + padding, 2);
  header += full;
  put(header, kPaddingField, 2);
  put(header, padding, 2);
  header.append(padding, 'Z');
  file_.write(header.data(), header.size());
  file_.write(bytes.data(), bytes.size());
  entries_.push_back({full, crc, bytes.size(), offset_});
  offset_ += header.size() + bytes.size();
}

void TorchZipWriter::commit() {
  if (!has_version_) add("version", "3\n");
  std::string directory;
  for (const Entry& e : entries_) {
    put(directory, 0x02014b50, 4);
    put(directory, kVersionNeeded, 2);  // made by (MS-DOS)
    put(directory, kVersionNeeded, 2);
    put(directory, kUtf8Names, 2);
    put(directory, 0, 2);
    put(directory, 0, 4);
    put(directory, e.crc, 4);
    put(directory, e.size, 4);
    put(directory, e.size, 4);
    put(directory, e.name.size(), 2);
    put(directory, 0, 2);  // extra
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);  // internal attributes
    put(directory, 0, 4);  // external attributes
    put(directory, e.offset, 4);
    directory += e.name;
  }
  const uint64_t directory_size = directory.size();
  KESTREL_CHECK(offset_ + directory_size < kMax32, "torch zip writer: the archive passes 4 GiB (no ZIP64)");
  put(directory, 0x06054b50, 4);
  put(directory, 0, 4);
  put(directory, entries_.size(), 2);
  put(directory, entries_.size(), 2);
  put(directory, directory_size, 4);
  put(directory, offset_, 4);
  put(directory, 0, 2);
  file_.write(directory.data(), directory.size());
  file_.commit();
}

}  // namespace kestrel
