// Unpacking a zip archive (a dataset such as coco128.zip) into a folder, safely for archives
// from strangers:
// - entry names are relative paths that stay inside the folder: an absolute name, a `..`
//   component or a NUL byte is refused (zip-slip), and links are refused;
// - sizes are bounded before anything is written: the entries' declared sizes together must fit
//   the limit and the free disk space, and an entry that inflates to more (or less) than it
//   declares, or to another CRC-32, is refused (a zip bomb or damage);
// - the archive is unpacked into a temporary folder beside the destination's entries and each
//   top-level entry renamed into place only when everything is out, so an interrupted or failed
//   unpack never looks like a complete dataset.
// Stored and deflated entries are read (zlib's raw inflate); macOS's `__MACOSX/` folders and
// `.DS_Store` files are skipped, as the reference's unzip_file does.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "io/zip_archive.h"

namespace kestrel {

// The entry's unpacked bytes, handed to `sink` in pieces, after checking that they come to the
// declared size and CRC-32. Throws naming the archive and the entry.
void read_zip_entry(const ZipArchive& zip, const ZipEntry& entry,
                    const std::function<void(std::string_view)>& sink);

// `name` as a relative path that stays below the folder it is unpacked into ("a/b/" for a
// folder keeps its trailing slash out); throws naming `archive` when it would not.
std::filesystem::path safe_entry_path(const std::string& name, const std::string& archive);

struct UnzipLimits {
  uint64_t max_bytes = uint64_t{256} << 30;  // the entries' unpacked sizes together
  bool check_free_space = true;              // and they must fit the destination's free space
};

// Unpacks the zip file `zip_path` into the existing folder `dest` and returns the top-level
// names it created there, sorted. A top-level name that already exists in `dest` is refused
// before anything is written (move it away and run again).
std::vector<std::string> unzip_file(const std::string& zip_path, const std::string& dest,
                                    const UnzipLimits& limits = {});

}  // namespace kestrel
