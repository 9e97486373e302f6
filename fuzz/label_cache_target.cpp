// A label cache is never trusted unless it decodes whole: it loads only when it re-encodes to the
// same bytes, and what it loads is what a scan can produce. Mutations would almost always break
// the checksum, so each input is also tried with its checksum made to match.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz/targets.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/label_cache.h"

namespace kestrel::fuzz {
namespace {

using namespace yolo::data;

// The cache format: magic (8), version (4), payload size (8), payload, FNV-1a-64 of the payload.
constexpr size_t kHeaderBytes = 20;
constexpr size_t kChecksumBytes = 8;
constexpr int kClassLimit = 80;  // the dataset's nc, as load_split passes it

uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

void check_loaded(const ScanResult& scan) {
  const ScanCounts& c = scan.counts;
  for (const int64_t v : {c.found, c.missing, c.empty, c.corrupt})
    require(v >= 0 && v <= c.total, "a count outside [0, total]");
  require(static_cast<int64_t>(scan.records.size()) <= c.total, "more records than images");
  for (const ImageRecord& r : scan.records) {
    require(!r.image_path.empty(), "a record without an image path");
    require(r.width >= 10 && r.height >= 10 && int64_t{r.width} * r.height <= kMaxImagePixels,
            "an image size the scan refuses");
    for (const LabelBox& b : r.boxes) {
      require(b.cls >= 0 && b.cls < kClassLimit, "a class outside [0, nc)");
      for (const float v : {b.x, b.y, b.w, b.h})
        require(std::isfinite(v) && v >= 0 && v <= 1, "a coordinate outside [0, 1]");
      require(b.w > 0 && b.h > 0, "an empty box");
    }
  }
}

void decode(std::string_view bytes) {
  // The hash a matching dataset would have: the payload's first field, when there is one.
  uint64_t hash = 0;
  if (bytes.size() >= kHeaderBytes + sizeof(hash)) std::memcpy(&hash, bytes.data() + kHeaderBytes, sizeof(hash));
  const CacheRead read = decode_label_cache(bytes, hash, kClassLimit);
  if (read.state != CacheState::Loaded) {
    require(read.state != CacheState::Missing && !read.problem.empty(), "a refusal without a reason");
    require(read.scan.records.empty() && read.scan.warnings.empty(), "a refused cache kept contents");
    return;
  }
  require(encode_label_cache(hash, read.scan) == bytes, "a loaded cache does not re-encode to its bytes");
  check_loaded(read.scan);
}

}  // namespace

void label_cache(std::string_view input) {
  decode(input);
  if (input.size() < kHeaderBytes + kChecksumBytes) return;
  std::string fixed(input);
  const size_t payload = fixed.size() - kHeaderBytes - kChecksumBytes;
  const uint64_t checksum = fnv1a(std::string_view(fixed).substr(kHeaderBytes, payload));
  std::memcpy(fixed.data() + kHeaderBytes + payload, &checksum, sizeof(checksum));
  decode(fixed);
}

}  // namespace kestrel::fuzz
