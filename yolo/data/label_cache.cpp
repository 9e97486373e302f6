#include "yolo/data/label_cache.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <type_traits>

#include "base/error.h"
#include "io/atomic_file.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'S', 'T', 'R', 'L', 'B', 'L', 'C'};
// magic, version, payload size ahead of the payload; its checksum after it.
constexpr size_t kHeaderBytes = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint64_t);

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Little-endian hosts only (x86-64, aarch64): values are written as they lie in memory.
class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_ += s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Every read is bounds-checked: a damaged file makes ok() false, never an overrun.
class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <class T>
  T get() {
    T v{};
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return {};
    }
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  // A count of items that each take at least `item_bytes`: more than fit means damage.
  uint64_t get_count(size_t item_bytes) {
    const uint64_t n = get<uint64_t>();
    if (n > static_cast<uint64_t>(end_ - p_) / item_bytes) ok_ = false;
    return ok_ ? n : 0;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

void hash_file(uint64_t& h, const std::string& path) {
  h = fnv1a(path.data(), path.size() + 1, h);  // with the terminating NUL: "ab"+"c" != "a"+"bc"
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  int64_t stamp[2] = {-1, -1};
  if (!ec && fs::is_regular_file(st)) {
    stamp[0] = static_cast<int64_t>(fs::file_size(path, ec));
    stamp[1] = fs::last_write_time(path, ec).time_since_epoch().count();
  }
  h = fnv1a(stamp, sizeof(stamp), h);
}

std::string encode_payload(uint64_t hash, const ScanResult& scan) {
  Writer w;
  w.put<uint64_t>(hash);
  const ScanCounts& c = scan.counts;
  for (int64_t v : {c.found, c.missing, c.empty, c.corrupt, c.total}) w.put<int64_t>(v);
  w.put<uint64_t>(scan.warnings.size());
  for (const std::string& s : scan.warnings) w.put_string(s);
  w.put<uint64_t>(scan.records.size());
  for (const ImageRecord& r : scan.records) {
    w.put_string(r.image_path);
    w.put<int32_t>(r.width);
    w.put<int32_t>(r.height);
    w.put<uint64_t>(r.boxes.size());
    for (const LabelBox& b : r.boxes) {
      w.put<int32_t>(b.cls);
      for (float v : {b.x, b.y, b.w, b.h}) w.put<float>(v);
    }
  }
  return w.bytes();
}

// False when the payload does not parse to the end; `hash` is read first so staleness can be told
// apart from damage.
bool decode_payload(const char* data, size_t size, uint64_t& hash, ScanResult& scan) {
  Reader r(data, size);
  hash = r.get<uint64_t>();
  ScanCounts& c = scan.counts;
  for (int64_t* v : {&c.found, &c.missing, &c.empty, &c.corrupt, &c.total}) *v = r.get<int64_t>();
  const uint64_t warnings = r.get_count(sizeof(uint32_t));
  for (uint64_t i = 0; i < warnings && r.ok(); ++i) scan.warnings.push_back(r.get_string());
  const uint64_t records = r.get_count(sizeof(uint32_t) + 2 * sizeof(int32_t) + sizeof(uint64_t));
  for (uint64_t i = 0; i < records && r.ok(); ++i) {
    ImageRecord rec;
    rec.image_path = r.get_string();
    rec.width = r.get<int32_t>();
    rec.height = r.get<int32_t>();
    const uint64_t boxes = r.get_count(sizeof(int32_t) + 4 * sizeof(float));
    for (uint64_t j = 0; j < boxes && r.ok(); ++j) {
      LabelBox b;
      b.cls = r.get<int32_t>();
      for (float* v : {&b.x, &b.y, &b.w, &b.h}) *v = r.get<float>();
      rec.boxes.push_back(b);
    }
    scan.records.push_back(std::move(rec));
  }
  return r.ok() && r.at_end();
}

// Empty when `scan` is something scan_images can return for `class_limit`, else what is not.
// The checksum only tells damage from chance; this keeps a cache written by anything else (or
// crafted) from handing the loader a class past nc or a box outside its image.
std::string implausible(const ScanResult& scan, int class_limit) {
  const ScanCounts& c = scan.counts;
  for (const int64_t v : {c.found, c.missing, c.empty, c.corrupt})
    if (v < 0 || v > c.total) return str("a count outside [0, ", c.total, "] images");
  if (static_cast<int64_t>(scan.records.size()) > c.total)
    return str(scan.records.size(), " records for ", c.total, " images");
  for (const ImageRecord& r : scan.records) {
    const std::string what = str("record '", r.image_path, "'");
    if (r.image_path.empty()) return "a record without an image path";
    if (r.width < 10 || r.height < 10 || int64_t{r.width} * r.height > kMaxImagePixels)
      return str(what, ": image size ", r.width, "x", r.height, ", which the scan refuses");
    for (const LabelBox& b : r.boxes) {
      if (b.cls < 0 || (class_limit > 0 && b.cls >= class_limit))
        return str(what, ": class ", b.cls, " outside [0, ", class_limit, ")");
      const bool normalised = std::isfinite(b.x) && std::isfinite(b.y) && std::isfinite(b.w) &&
                              std::isfinite(b.h) && b.x >= 0 && b.x <= 1 && b.y >= 0 && b.y <= 1 &&
                              b.w > 0 && b.w <= 1 && b.h > 0 && b.h <= 1;
      if (!normalised)
        return str(what, ": box ", b.x, " ", b.y, " ", b.w, " ", b.h, " is not normalised");
    }
  }
  return {};
}

}  // namespace

std::string label_cache_path(const std::vector<std::string>& sources,
                             const std::vector<std::string>& image_paths) {
  KESTREL_CHECK(!sources.empty() && !image_paths.empty(),
                "label_cache_path: needs the split's sources and at least one image");
  std::error_code ec;
  fs::path p = fs::is_regular_file(sources.back(), ec)
                   ? fs::path(sources.back())
                   : fs::path(image_to_label_path(image_paths.front())).parent_path();
  // Our own name next to the reference's `.cache`: both tools can share a dataset without each
  // calling the other's cache damaged and rewriting it.
  return p.replace_extension(kLabelCacheSuffix).string();
}

uint64_t label_files_hash(const std::vector<std::string>& image_paths, int class_limit) {
  uint64_t h = fnv1a(&kLabelCacheVersion, sizeof(kLabelCacheVersion));
  h = fnv1a(&class_limit, sizeof(class_limit), h);
  for (const std::string& image : image_paths) {
    hash_file(h, image);
    hash_file(h, image_to_label_path(image));
  }
  return h;
}

CacheRead read_label_cache(const std::string& path, uint64_t expected_hash, int class_limit) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return {};  // Missing
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return decode_label_cache(bytes, expected_hash, class_limit);
}

CacheRead decode_label_cache(std::string_view bytes, uint64_t expected_hash, int class_limit) {
  CacheRead out;
  out.state = CacheState::Corrupt;
  if (bytes.size() < kHeaderBytes + sizeof(uint64_t) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    out.problem = "not a kestrel label cache, or truncated";
    return out;
  }
  uint32_t version = 0;
  uint64_t payload_size = 0;
  std::memcpy(&version, bytes.data() + sizeof(kMagic), sizeof(version));
  std::memcpy(&payload_size, bytes.data() + sizeof(kMagic) + sizeof(version), sizeof(payload_size));
  if (version != kLabelCacheVersion) {
    out.state = CacheState::Stale;
    out.problem = str("written by cache format version ", version, ", this is ", kLabelCacheVersion);
    return out;
  }
  if (payload_size != bytes.size() - kHeaderBytes - sizeof(uint64_t)) {
    out.problem = str("truncated or extended: payload of ", payload_size, " bytes announced, ",
                      bytes.size() - kHeaderBytes - sizeof(uint64_t), " present");
    return out;
  }
  const char* payload = bytes.data() + kHeaderBytes;
  uint64_t checksum = 0;
  std::memcpy(&checksum, payload + payload_size, sizeof(checksum));
  if (checksum != fnv1a(payload, payload_size)) {
    out.problem = "checksum mismatch (the file is damaged)";
    return out;
  }
  uint64_t hash = 0;
  if (!decode_payload(payload, payload_size, hash, out.scan)) {
    out.scan = {};
    out.problem = "payload does not parse";
    return out;
  }
  if (hash != expected_hash) {
    out.scan = {};
    out.state = CacheState::Stale;
    out.problem = "the image or label files changed since it was written";
    return out;
  }
  // fuzz/corpus/label_cache/regress-*: caches with a valid checksum and impossible contents.
  out.problem = implausible(out.scan, class_limit);
  if (!out.problem.empty()) {
    out.scan = {};
    out.problem = str("holds what no scan produces: ", out.problem);
    return out;
  }
  out.state = CacheState::Loaded;
  return out;
}

std::string encode_label_cache(uint64_t hash, const ScanResult& scan) {
  const std::string payload = encode_payload(hash, scan);
  Writer w;
  for (char c : kMagic) w.put<char>(c);
  w.put<uint32_t>(kLabelCacheVersion);
  w.put<uint64_t>(payload.size());
  std::string bytes = w.bytes() + payload;
  const uint64_t checksum = fnv1a(payload.data(), payload.size());
  bytes.append(reinterpret_cast<const char*>(&checksum), sizeof(checksum));
  return bytes;
}

std::string write_label_cache(const std::string& path, uint64_t hash, const ScanResult& scan) {
  const std::string bytes = encode_label_cache(hash, scan);

  // Ranks of one job (or runs sharing a dataset) may write at once: each writes its own file,
  // the last rename wins whole.
  const std::string tmp = unique_temp_path(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return str("cannot create ", tmp, ": ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return str("cannot write ", tmp, " (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return str("cannot rename ", tmp, " to ", path, ": ", ec.message());
  }
  return {};
}

}  // namespace kestrel::yolo::data
