// Checking image/label pairs the way the reference's verify_image_label does: the image must
// open (a JPEG's header and whole marker chain, anything else decoded in full), hold at most PIL's
// kMaxImagePixels and be at least 10 px each side, the label rows must be valid normalised boxes;
// a bad pair is skipped with a warning that names the file (and the row), never used. A damaged
// JPEG the decoder recovers (cut short, no end marker) is used with a warning, as the reference
// restores it.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/thread_pool.h"
#include "yolo/data/records.h"

namespace kestrel::yolo::data {

// The reference's img2label_paths: the last "/images/" becomes "/labels/" and the extension
// ".txt" (a path without "/images/" keeps its folder).
std::string image_to_label_path(const std::string& image_path);

// The reference's scan counters. As there, `found` counts label files present (an empty one, or
// one whose image was refused for its labels, included); backgrounds are missing + empty.
struct ScanCounts {
  int64_t found = 0, missing = 0, empty = 0, corrupt = 0;
  int64_t total = 0;  // images scanned
  int64_t backgrounds() const { return missing + empty; }
  bool operator==(const ScanCounts&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const ScanCounts& c) {
  return os << "{found " << c.found << ", missing " << c.missing << ", empty " << c.empty
            << ", corrupt " << c.corrupt << ", total " << c.total << "}";
}

// The rows of one label file. Rows are "class x y w h"; as the reference, when any row has more
// than 6 values every row is a polygon "class x1 y1 x2 y2 ..." and becomes its bounding box.
// Checked: numbers finite, class an integer in [0, class_limit) (class_limit <= 0: any class
// >= 0), coordinates in [0, 1], w and h > 0. Exact duplicate rows are dropped and counted.
struct ParsedLabels {
  std::vector<LabelBox> boxes;
  int duplicates = 0;
  std::string error;  // non-empty: the file is refused; names the row (1-based) and the problem
};
ParsedLabels parse_labels(std::string_view text, int class_limit);

// One image/label pair. `counts` holds this pair's contribution (total = 1); `warning` is empty
// when there is nothing to say. `usable` false: corrupt, and `record` must not be used.
struct PairCheck {
  bool usable = false;
  ImageRecord record;
  ScanCounts counts;
  std::string warning;
};
PairCheck verify_image_label(const std::string& image_path, const std::string& label_path,
                             int class_limit);

struct ScanResult {
  std::vector<ImageRecord> records;  // in the order of the images given
  ScanCounts counts;
  std::vector<std::string> warnings;  // in the order of the images given
};

// Checks every image (label paths by image_to_label_path) on the pool. The result does not
// depend on the number of threads.
ScanResult scan_images(const std::vector<std::string>& image_paths, int class_limit,
                       ThreadPool& pool);

// The scan's result from every pair's check, in the order given: counts summed, warnings kept,
// usable records kept (scan_images and the segmentation scan, seg_scan.h, share it).
ScanResult collect_checks(std::vector<PairCheck> checks);

// "Scanning '<what>'... 126 images, 2 backgrounds, 0 corrupt", as the reference prints.
std::string scan_summary(const std::string& what, const ScanCounts& counts);

}  // namespace kestrel::yolo::data
