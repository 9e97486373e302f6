// The label cache the reference keeps next to the labels (labels/train2017.cache): the checked
// records, counts and warnings of a scan, so later runs skip decoding every image. Our own binary
// format: a magic, a format version, the payload and an FNV-1a checksum of it. A cache written by
// another version, for other files (a hash of the image and label paths with their sizes and
// modification times, and the class limit the labels were checked against), or that fails its
// checksum or parse, is never used.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "yolo/data/label_scan.h"

namespace kestrel::yolo::data {

// 2: damaged JPEGs the decoder recovers are used, images above PIL's pixel limit refused; the
// verdicts of a version-1 scan no longer hold.
// 3: CMYK JPEGs are used, JPEGs without scan data refused: version-2 verdicts on those are wrong.
// 4: JPEGs with a whole marker chain are judged from their headers, no longer decoded: damage
// inside their entropy-coded data, which a version-3 scan refused when the decoder could not
// recover it, now passes the scan as it passes the reference's.
inline constexpr uint32_t kLabelCacheVersion = 4;

// Where the reference puts its cache, under our own suffix (the reference's `.cache` stays its
// own): beside a list file when the split's last source is a file (train.txt ->
// train.kestrel.cache), else beside the first label's directory (labels/train2017 ->
// labels/train2017.kestrel.cache).
inline constexpr const char* kLabelCacheSuffix = ".kestrel.cache";
std::string label_cache_path(const std::vector<std::string>& sources,
                             const std::vector<std::string>& image_paths);

// Changes when any image or label file appears, disappears, is renamed, resized or rewritten, or
// when the class limit changes.
uint64_t label_files_hash(const std::vector<std::string>& image_paths, int class_limit);

enum class CacheState { Loaded, Missing, Stale, Corrupt };

struct CacheRead {
  CacheState state = CacheState::Missing;
  ScanResult scan;      // valid when Loaded
  std::string problem;  // why it was not Loaded (empty when Missing)
};

// A cache whose contents no scan against `class_limit` (as for scan_images) could have produced
// (a class out of range, a box outside the image, an image the scan refuses, counts that do not
// add up) is Corrupt, even with a matching checksum: it is rescanned, never used.
CacheRead read_label_cache(const std::string& path, uint64_t expected_hash, int class_limit);

// The checks of read_label_cache on a cache file's bytes (never Missing).
CacheRead decode_label_cache(std::string_view bytes, uint64_t expected_hash, int class_limit);

// The bytes write_label_cache writes.
std::string encode_label_cache(uint64_t hash, const ScanResult& scan);

// Writes to a temporary file beside `path` and renames it, so readers never see a torn cache.
// Returns an empty string on success, otherwise why it could not be written (read-only folder...).
std::string write_label_cache(const std::string& path, uint64_t hash, const ScanResult& scan);

}  // namespace kestrel::yolo::data
