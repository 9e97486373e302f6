// Reading and writing the safetensors format, the reference implementation's weight files:
//   8-byte little-endian u64 N | N bytes of UTF-8 JSON header | raw little-endian tensor data.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data section) plus an optional "__metadata__" string map.
// Loading checks everything the reference checks (and a little more) and refuses a bad file with
// a message naming the file and the problem; it never reads outside the file.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"

namespace kestrel {

// One tensor to write: its header entry and a function that streams its bytes (`nbytes` of them,
// in as many calls to `sink` as it likes), so a writer holds one tensor's host copy at a time.
struct SafetensorsRecord {
  std::string name;
  std::string dtype;  // as in the file format ("F32", "BF16", ...)
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  std::function<void(const std::function<void(const void*, size_t)>& sink)> write;
};

// Writes `records` to `path`, sorted by name with data in that order, header padded with spaces
// to a multiple of 8 bytes as the reference writer does. Writes a temporary of its own
// (io/atomic_file.h), flushes it to disk, then renames it over `path`, so a crash leaves either
// the old file or the new one, never a torn one. (engine/safetensors_tensors.h writes tensors.)
void write_safetensors(const std::string& path, std::vector<SafetensorsRecord> records,
                       const std::map<std::string, std::string>& metadata = {});

// The format's name of a Kestrel dtype ("F32", "BF16", ...), and Kestrel's dtype of a format name
// (none for the format's types Kestrel has no tensors of: BOOL, I8, U16, F8_E4M3, ...).
const char* safetensors_dtype_name(DType dtype);
std::optional<DType> safetensors_dtype(const std::string& format_name);

// One tensor's header entry. dtype is spelled as in the file ("F32", "BF16", "F8_E4M3", ...).
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

// A loaded file: header validated, data section held in memory (copies share it).
class SafetensorsFile {
 public:
  // A tensor read from another format, its values contiguous in `bytes`.
  struct Part {
    std::string name;
    std::string dtype;  // as in the file format ("F16", "I64", ...)
    std::vector<int64_t> shape;
    std::string bytes;
  };
  // A file assembled in memory from tensors read elsewhere (a PyTorch checkpoint), so that every
  // weights loader reads it as it reads a safetensors file. Throws for a repeated name, an unknown
  // dtype, or bytes that do not match a part's dtype and shape.
  static SafetensorsFile assemble(const std::string& path, std::vector<Part> parts,
                                  std::map<std::string, std::string> metadata);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }  // in header order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  // The stored bytes of a tensor (entry(name).end - begin of them), a view into the file's data.
  std::string_view bytes(const std::string& name) const;
  // The entry of a tensor that Kestrel can hold: a dtype it has (BOOL, I8, U16, F8_E4M3, ... are
  // refused here, naming the dtype; the rest of the file stays readable) and at most `max_dims`
  // dimensions.
  const SafetensorsEntry& checked_entry(const std::string& name, DType* dtype, size_t max_dims) const;

 private:
  friend class SafetensorsReader;
  std::string path_;
  std::vector<std::string> names_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<const std::vector<char>> data_;
};

SafetensorsFile load_safetensors(const std::string& path);

// The same checks on a whole file already in memory; `path` only names it in messages.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& path);

}  // namespace kestrel
