// Reading what torch.save writes (PyTorch >= 1.6): a zip archive holding `<name>/data.pkl`, a
// protocol-2 pickle of the saved object, and `<name>/data/<key>`, the raw little-endian bytes of
// each storage. The pickle refers to a storage by a persistent id ('storage', torch.HalfStorage,
// key, location, numel), and a tensor is the record torch._utils._rebuild_tensor_v2(storage,
// offset, size, stride, requires_grad, hooks), a parameter _rebuild_parameter(tensor, ...).
// The unpickler runs nothing (io/pickle.h): only those torch globals and the caller's own
// are accepted, so reading a file from a stranger is safe, unlike torch.load.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/pickle.h"
#include "io/zip_archive.h"

namespace kestrel {

// A tensor's values as stored, made contiguous: dtype in safetensors' spelling ("F16", "I64", ...).
struct TorchTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

class TorchFile {
 public:
  // `bytes` is the whole file; `extra_globals` admits the caller's classes (records only).
  static TorchFile parse(std::string bytes, const std::string& path, const pickle::GlobalPolicy& extra_globals);

  const std::string& path() const { return path_; }
  const pickle::Value& root() const { return doc_->root(); }
  const pickle::Document& document() const { return *doc_; }

  // Whether `v` is a tensor or parameter record.
  static bool is_tensor(const pickle::Value& v);
  // The tensor `v` describes; throws naming `what` when it is none or its storage is bad.
  TorchTensor tensor(const pickle::Value& v, const std::string& what) const;

 private:
  std::string path_;
  std::shared_ptr<const std::string> bytes_;  // the archive's entries are views into it
  std::shared_ptr<const ZipArchive> zip_;
  std::shared_ptr<const pickle::Document> doc_;
  std::string prefix_;  // "archive/": the folder holding data.pkl
};

// True for the torch globals TorchFile admits by itself (the rebuild functions, the storage
// types, collections.OrderedDict).
bool is_torch_global(const std::string& qualified_name);

}  // namespace kestrel
