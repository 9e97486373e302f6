#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/zip_archive.h"

namespace kestrel {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data and this code copies it verbatim");

// The reference refuses headers above this size; so do we, before allocating anything.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
// Kestrel's own files carry a CRC-32 of every tensor's bytes in their metadata, under this key: a
// JSON object of tensor name to 8 hex digits, checked whenever such a file is read.
constexpr const char* kChecksumKey = "crc32";

// Every dtype the format defines, with its width in bits and Kestrel's type where there is one.
struct FormatDType {
  const char* name;
  uint64_t bits;
  std::optional<DType> dtype;
};
constexpr FormatDType kFormatDTypes[] = {
    {"BOOL", 8, std::nullopt},    {"F4", 4, std::nullopt},      {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt}, {"U8", 8, DType::U8},         {"I8", 8, std::nullopt},
    {"F8_E5M2", 8, std::nullopt}, {"F8_E4M3", 8, std::nullopt}, {"F8_E8M0", 8, std::nullopt},
    {"I16", 16, std::nullopt},    {"U16", 16, std::nullopt},    {"F16", 16, DType::F16},
    {"BF16", 16, DType::BF16},    {"I32", 32, DType::I32},      {"U32", 32, std::nullopt},
    {"F32", 32, DType::F32},      {"C64", 64, std::nullopt},    {"F64", 64, DType::F64},
    {"I64", 64, DType::I64},      {"U64", 64, std::nullopt},
};
constexpr const char* kSupportedList = "F32, F64, F16, BF16, I32, I64, U8";

const FormatDType* find_format_dtype(const std::string& name) {
  for (const FormatDType& f : kFormatDTypes)
    if (name == f.name) return &f;
  return nullptr;
}

const char* format_name(DType t) {
  for (const FormatDType& f : kFormatDTypes)
    if (f.dtype == t) return f.name;
  KESTREL_FAIL("safetensors: no file dtype for ", dtype_name(t));
}

std::string all_format_names() {
  std::string s;
  for (const FormatDType& f : kFormatDTypes) s += std::string(s.empty() ? "" : ", ") + f.name;
  return s;
}

// The metadata as one text, in key order: what its checksum covers.
std::string metadata_text(const std::map<std::string, std::string>& metadata) {
  json::Object o;
  for (const auto& [key, value] : metadata) o.emplace_back(key, json::Value(value));
  return json::dump(json::Value(std::move(o)));
}

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  KESTREL_FAIL("safetensors file '", path, "': ", what);
}

// --- files ------------------------------------------------------------------------------------

class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) bad_file(path, str("cannot open it: ", std::strerror(errno)));
    struct stat st;
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      bad_file(path, "not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read(uint64_t offset, void* dst, uint64_t n) const {
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) bad_file(path_, str("read failed: ", std::strerror(errno)));
      if (got == 0) bad_file(path_, "the file shrank while it was being read");
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A whole file already in memory, read through the same interface.
class MemoryInput {
 public:
  explicit MemoryInput(std::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const { return bytes_.size(); }
  void read(uint64_t offset, void* dst, uint64_t n) const {
    KESTREL_CHECK(offset <= bytes_.size() && n <= bytes_.size() - offset,
                  "safetensors: read of ", n, " bytes at ", offset, " past the end of ",
                  bytes_.size(), " bytes");
    if (n > 0) std::memcpy(dst, bytes_.data() + offset, n);
  }

 private:
  std::string_view bytes_;
};

// --- header entries -------------------------------------------------------------------------------

uint64_t non_negative_integer(const std::string& path, const std::string& where,
                              const json::Value& v) {
  if (!v.is_integer() || v.as_integer() < 0)
    bad_file(path, str(where, " must be a non-negative integer below 2^63, got ",
                       v.is_integer() || v.is_real() ? json::dump(v) : json::kind_name(v.kind())));
  return static_cast<uint64_t>(v.as_integer());
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name,
                             const json::Value& v, uint64_t data_size) {
  const std::string what = str("tensor '", name, "'");
  if (!v.is_object())
    bad_file(path, str(what, " must be an object with dtype, shape and data_offsets, got ",
                       json::kind_name(v.kind())));
  for (const auto& member : v.as_object())
    if (member.first != "dtype" && member.first != "shape" && member.first != "data_offsets")
      bad_file(path, str(what, " has the unexpected key '", member.first,
                         "' (an entry has exactly dtype, shape and data_offsets)"));
  const auto need = [&](const char* key) -> const json::Value& {
    const json::Value* p = v.find(key);
    if (!p) bad_file(path, str(what, " has no '", key, "'"));
    return *p;
  };

  SafetensorsEntry e;
  const json::Value& dtype = need("dtype");
  if (!dtype.is_string())
    bad_file(path, str(what, ": dtype must be a string, got ", json::kind_name(dtype.kind())));
  e.dtype = dtype.as_string();
  const FormatDType* format = find_format_dtype(e.dtype);
  if (!format)
    bad_file(path, str(what, " has the unknown dtype '", e.dtype, "' (the format defines ",
                       all_format_names(), ")"));

  const json::Value& shape = need("shape");
  if (!shape.is_array())
    bad_file(path, str(what, ": shape must be an array, got ", json::kind_name(shape.kind())));
  // Kestrel computes strides as products of the dimensions (zeros counted as ones), so those
  // products must fit in int64; that also bounds the element count.
  uint64_t numel = 1, span = 1;
  for (size_t d = 0; d < shape.as_array().size(); ++d) {
    const uint64_t size = non_negative_integer(path, str(what, ": shape[", d, "]"),
                                               shape.as_array()[d]);
    e.shape.push_back(static_cast<int64_t>(size));
    const uint64_t factor = std::max<uint64_t>(size, 1);
    if (span > uint64_t(INT64_MAX) / factor)
      bad_file(path, str(what, " has a shape whose dimensions multiply past 2^63 (starting ",
                         shape_str(e.shape), "): no file can hold it"));
    span *= factor;
    numel *= size;
  }
  if (numel > UINT64_MAX / format->bits)
    bad_file(path, str(what, " has shape ", shape_str(e.shape), ": more ", e.dtype,
                       " elements than any file can hold"));
  const uint64_t bits = numel * format->bits;
  if (bits % 8 != 0)
    bad_file(path, str(what, ": ", numel, " elements of ", e.dtype, " (", format->bits,
                       " bits each) do not fill whole bytes"));
  const uint64_t nbytes = bits / 8;

  const json::Value& offsets = need("data_offsets");
  if (!offsets.is_array() || offsets.as_array().size() != 2)
    bad_file(path, str(what, ": data_offsets must be an array [begin, end], got ",
                       offsets.is_array() ? json::dump(offsets) : json::kind_name(offsets.kind())));
  e.begin = non_negative_integer(path, what + ": data_offsets[0]", offsets.as_array()[0]);
  e.end = non_negative_integer(path, what + ": data_offsets[1]", offsets.as_array()[1]);
  if (e.end < e.begin)
    bad_file(path, str(what, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin"));
  if (e.end - e.begin != nbytes)
    bad_file(path, str(what, " (", e.dtype, ", shape ", shape_str(e.shape), ") needs ", nbytes,
                       " bytes, but its data_offsets [", e.begin, ", ", e.end, "] span ",
                       e.end - e.begin));
  if (e.end > data_size)
    bad_file(path, str(what, ": data_offsets [", e.begin, ", ", e.end,
                       "] reach past the end of the data section (", data_size,
                       " bytes): the file is truncated or the header is wrong"));
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json::Value& v) {
  if (!v.is_object())
    bad_file(path, str(kMetadataKey, " must be an object of strings, got ",
                       json::kind_name(v.kind())));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.as_object()) {
    if (!value.is_string())
      bad_file(path, str(kMetadataKey, " must map strings to strings, but '", key, "' is ",
                         json::kind_name(value.kind())));
    out[key] = value.as_string();
  }
  return out;
}

// Like the reference: tensors, taken in offset order, tile the data section exactly.
void check_layout(const std::string& path, const std::map<std::string, SafetensorsEntry>& entries,
                  uint64_t data_size) {
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : entries) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < covered)
      bad_file(path, str("tensor '", *name, "' (bytes [", e->begin, ", ", e->end,
                         ")) overlaps tensor '", *previous, "' (which ends at ", covered,
                         "); tensors must not share bytes"));
    if (e->begin > covered)
      bad_file(path, str("bytes [", covered, ", ", e->begin, ") of the data section, before tensor '",
                         *name, "', belong to no tensor; the format allows no holes"));
    covered = e->end;
    previous = name;
  }
  if (covered != data_size)
    bad_file(path, str("the data section has ", data_size, " bytes but the tensors cover only ",
                       covered, ": ", data_size - covered,
                       " trailing bytes belong to no tensor (corrupt file?)"));
}

}  // namespace

// --- writing --------------------------------------------------------------------------------------

const char* safetensors_dtype_name(DType dtype) { return format_name(dtype); }

std::optional<DType> safetensors_dtype(const std::string& name) {
  const FormatDType* f = find_format_dtype(name);
  return f ? f->dtype : std::nullopt;
}

void write_safetensors(const std::string& path, std::vector<SafetensorsRecord> records,
                       const std::map<std::string, std::string>& metadata) {
  for (const SafetensorsRecord& r : records) {
    KESTREL_CHECK(r.name != kMetadataKey, "save_safetensors('", path, "'): '", kMetadataKey,
                  "' is reserved for the metadata and cannot name a tensor");
    KESTREL_CHECK(find_format_dtype(r.dtype), "save_safetensors('", path, "'): tensor '", r.name,
                  "' has the unknown dtype '", r.dtype, "'");
  }
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 1; i < records.size(); ++i)
    KESTREL_CHECK(records[i].name != records[i - 1].name, "save_safetensors('", path,
                  "'): the name '", records[i].name, "' is given twice; names must be unique");

  // A first pass over the bytes for their checksums, which the header holds; the second writes
  // them and must see the same bytes.
  std::vector<uint32_t> crcs;
  json::Object checksums;
  for (const SafetensorsRecord& r : records) {
    uint32_t crc = 0;
    r.write([&](const void* data, size_t n) { crc = crc32(std::string_view(static_cast<const char*>(data), n), crc); });
    crcs.push_back(crc);
    checksums.emplace_back(r.name, json::Value(hex8(crc)));
  }
  std::map<std::string, std::string> with_checksums = metadata;
  with_checksums.erase(kChecksumKey);
  checksums.emplace_back(kMetadataKey, json::Value(hex8(crc32(metadata_text(with_checksums)))));
  with_checksums[kChecksumKey] = json::dump(json::Value(std::move(checksums)));
  json::Object header;
  {
    json::Object m;
    for (const auto& [key, value] : with_checksums) m.emplace_back(key, json::Value(value));
    header.emplace_back(kMetadataKey, std::move(m));
  }
  int64_t offset = 0;
  for (const SafetensorsRecord& r : records) {
    json::Array shape;
    for (int64_t d : r.shape) shape.emplace_back(d);
    const int64_t nbytes = static_cast<int64_t>(r.nbytes);
    header.emplace_back(r.name, json::Object{{"dtype", json::Value(r.dtype)},
                                             {"shape", std::move(shape)},
                                             {"data_offsets", json::Array{offset, offset + nbytes}}});
    offset += nbytes;
  }
  std::string text;
  try {
    text = json::dump(header);
  } catch (const Error& e) {
    KESTREL_FAIL("save_safetensors('", path, "'): a tensor name or metadata entry cannot be written: ",
                 e.what());
  }
  // The data section starts 8-byte aligned, so a reader mapping the file can use it in place.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile out(path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  out.write(length, 8);
  out.write(text.data(), text.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const SafetensorsRecord& r = records[i];
    uint64_t written = 0;
    uint32_t crc = 0;
    r.write([&](const void* data, size_t n) {
      out.write(data, n);
      crc = crc32(std::string_view(static_cast<const char*>(data), n), crc);
      written += n;
    });
    KESTREL_CHECK(written == r.nbytes, "save_safetensors('", path, "'): tensor '", r.name, "' wrote ",
                  written, " bytes, its header says ", r.nbytes);
    KESTREL_CHECK(crc == crcs[i], "save_safetensors('", path, "'): tensor '", r.name,
                  "' changed while it was written; nothing was saved");
  }
  out.commit();
}

// --- reading --------------------------------------------------------------------------------------

namespace {

// Every tensor against the checksum its file's metadata holds, where it holds them (Kestrel's
// files; a file another writer made has none, and is read as it is).
void verify_checksums(const std::string& path, const SafetensorsFile& file) {
  const auto it = file.metadata().find(kChecksumKey);
  if (it == file.metadata().end()) return;
  json::Value sums;
  try {
    sums = json::parse(it->second);
  } catch (const Error&) {
  }
  if (!sums.is_object())
    bad_file(path, str("its '", kChecksumKey, "' metadata is not the object of checksums Kestrel writes: the ",
                       "header is damaged; copy the file again, or resume from the checkpoint before it"));
  std::map<std::string, std::string> others = file.metadata();
  others.erase(kChecksumKey);
  const json::Value* meta_sum = sums.find(kMetadataKey);
  if (meta_sum && (!meta_sum->is_string() || meta_sum->as_string() != hex8(crc32(metadata_text(others)))))
    bad_file(path, "its metadata (the run's options, progress and state) fails its CRC-32 check: the header was "
                   "damaged after it was written. Copy it again, or resume from the checkpoint before it (a "
                   "training run keeps that as weights/last.prev.safetensors until it ends)");
  for (const std::string& name : file.names()) {
    const json::Value* stored = sums.find(name);
    if (!stored || !stored->is_string())
      bad_file(path, str("tensor '", name, "' has no checksum in its '", kChecksumKey, "' metadata: the header is ",
                         "damaged; copy the file again, or resume from the checkpoint before it"));
    const std::string read = hex8(crc32(file.bytes(name)));
    if (read != stored->as_string())
      bad_file(path, str("tensor '", name, "' fails its CRC-32 check (written ", stored->as_string(), ", read ", read,
                         "): the file was damaged after it was written (a flipped bit on disk or in a copy). ",
                         "Copy it again, or resume from the checkpoint before it (a training run keeps that as ",
                         "weights/last.prev.safetensors until it ends)"));
  }
}

}  // namespace

// Reads the header, checks it whole, then reads the data section: a bad header costs no
// allocation of the data's size.
class SafetensorsReader {
 public:
  template <class Input>
  static SafetensorsFile read(const std::string& path, const Input& file);
};

template <class Input>
SafetensorsFile SafetensorsReader::read(const std::string& path, const Input& file) {
  if (file.size() < 8)
    bad_file(path, str("it is ", file.size(),
                       " bytes long, shorter than the 8-byte header length: not a safetensors "
                       "file, or truncated"));
  uint8_t length[8];
  file.read(0, length, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  // A header length that cannot be right, in a file starting like PyTorch's .pt (a zip archive,
  // "PK\3\4", or a legacy raw pickle, opcode 0x80): say what it is and how to convert it.
  const bool pytorch = (length[0] == 'P' && length[1] == 'K' && length[2] == 3 && length[3] == 4) || length[0] == 0x80;
  if (pytorch && (n > kMaxHeaderBytes || 8 + n > file.size()))
    bad_file(path, "it is a PyTorch checkpoint (.pt), not safetensors; --weights of train, val, "
                   "detect and export reads it directly");
  if (n > kMaxHeaderBytes)
    bad_file(path, str("the header length field says ", n, " bytes, above the ", kMaxHeaderBytes,
                       "-byte limit: not a safetensors file, or corrupt"));
  if (8 + n > file.size())
    bad_file(path, str("the header length field says ", n, " bytes, but only ", file.size() - 8,
                       " bytes follow it: truncated or not a safetensors file"));

  std::string text(n, '\0');
  file.read(8, text.data(), n);
  if (text.empty() || text[0] != '{')
    bad_file(path, "the header does not start with '{': not a safetensors file, or corrupt");
  size_t bad;
  if (!json::valid_utf8(text, &bad))
    bad_file(path, str("the header is not valid UTF-8 (byte ", bad, " of the header)"));
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const Error& e) {
    bad_file(path, str("the header is not valid JSON: ", e.what()));
  }

  const uint64_t data_size = file.size() - 8 - n;
  SafetensorsFile out;
  out.path_ = path;
  for (const auto& [key, value] : root.as_object()) {
    if (key == kMetadataKey) {
      out.metadata_ = parse_metadata(path, value);
      continue;
    }
    out.entries_[key] = parse_entry(path, key, value, data_size);
    out.names_.push_back(key);
  }
  check_layout(path, out.entries_, data_size);

  auto data = std::make_shared<std::vector<char>>(data_size);
  file.read(8 + n, data->data(), data_size);
  out.data_ = std::move(data);
  verify_checksums(path, out);
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  return SafetensorsReader::read(path, InputFile(path));
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& path) {
  return SafetensorsReader::read(path, MemoryInput(bytes));
}

SafetensorsFile SafetensorsFile::assemble(const std::string& path, std::vector<Part> parts,
                                          std::map<std::string, std::string> metadata) {
  SafetensorsFile out;
  out.path_ = path;
  out.metadata_ = std::move(metadata);
  auto data = std::make_shared<std::vector<char>>();
  for (Part& p : parts) {
    const FormatDType* format = find_format_dtype(p.dtype);
    KESTREL_CHECK(format, path, ": tensor '", p.name, "' has the unknown dtype '", p.dtype, "'");
    uint64_t numel = 1;
    for (int64_t d : p.shape) numel *= static_cast<uint64_t>(d);
    KESTREL_CHECK(numel * format->bits == p.bytes.size() * 8, path, ": tensor '", p.name, "' (",
                  p.dtype, ", shape ", shape_str(p.shape), ") comes with ", p.bytes.size(), " bytes");
    KESTREL_CHECK(!out.entries_.count(p.name), path, ": the tensor name '", p.name, "' appears twice");
    const uint64_t begin = data->size();
    data->insert(data->end(), p.bytes.begin(), p.bytes.end());
    out.entries_[p.name] = SafetensorsEntry{p.dtype, std::move(p.shape), begin, data->size()};
    out.names_.push_back(p.name);
  }
  out.data_ = std::move(data);
  return out;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string some;
    for (size_t i = 0; i < names_.size() && i < 5; ++i) some += (i ? ", " : "") + names_[i];
    if (names_.size() > 5) some += ", ...";
    KESTREL_FAIL("safetensors file '", path_, "' has no tensor named '", name, "' (it holds ",
                 names_.size(), " tensors", names_.empty() ? "" : ": ", some, ")");
  }
  return it->second;
}

std::string_view SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return std::string_view(data_->data() + e.begin, e.end - e.begin);
}

const SafetensorsEntry& SafetensorsFile::checked_entry(const std::string& name, DType* dtype,
                                                       size_t max_dims) const {
  const SafetensorsEntry& e = entry(name);
  const FormatDType* format = find_format_dtype(e.dtype);
  KESTREL_CHECK(format->dtype, "safetensors file '", path_, "': tensor '", name, "' has dtype ",
                e.dtype, ", which Kestrel has no tensor type for (it reads ", kSupportedList,
                "); convert the tensor to one of those when exporting the file");
  KESTREL_CHECK(e.shape.size() <= max_dims, "safetensors file '", path_, "': tensor '", name, "' has ",
                e.shape.size(), " dimensions, Kestrel tensors have at most ", max_dims);
  *dtype = *format->dtype;
  return e;
}

}  // namespace kestrel
