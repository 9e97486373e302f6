// Writing the container torch.save makes (PyTorch >= 1.6; io/torch_file.h reads it): a zip archive
// of stored (uncompressed) entries under one folder, `<name>/data.pkl` (the pickle),
// `<name>/byteorder` ("little"), `<name>/data/<key>` (each storage's raw bytes) and
// `<name>/version` ("3"). As torch does, every entry's data starts on a 64-byte boundary of the
// file (the local header carries an extra field of padding), so a loader may map storages in
// place. The file is written through io/atomic_file.h: a crash leaves the old file or the new.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/atomic_file.h"

namespace kestrel {

class TorchZipWriter {
 public:
  // `archive_name` is the folder inside the zip (torch.save uses the file's stem, or "archive").
  TorchZipWriter(std::string path, std::string archive_name = "archive");
  TorchZipWriter(const TorchZipWriter&) = delete;
  TorchZipWriter& operator=(const TorchZipWriter&) = delete;

  // Entry `name` (relative to the folder: "data.pkl", "data/0"), written at once.
  void add(const std::string& name, std::string_view bytes);
  // The pickle, then a storage: the usual order is write_pickle, add_storage for each key, commit.
  void write_pickle(std::string_view data_pkl);
  void add_storage(const std::string& key, std::string_view bytes) { add("data/" + key, bytes); }
  // Writes version "3" (unless added), the central directory and the end record, and renames the
  // file into place. Without it the destructor leaves nothing behind.
  void commit();

 private:
  struct Entry {
    std::string name;
    uint32_t crc;
    uint64_t size, offset;
  };
  void put(std::string& out, uint64_t v, int width);
  AtomicFile file_;
  std::string archive_;
  std::vector<Entry> entries_;
  uint64_t offset_ = 0;
  bool has_version_ = false;
};

// The 64-byte alignment torch gives storage data in its zip files.
inline constexpr uint64_t kTorchZipAlignment = 64;

}  // namespace kestrel
