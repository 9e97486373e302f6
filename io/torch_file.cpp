#include "io/torch_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace kestrel {
namespace {

using pickle::Value;

constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr uint64_t kMaxExpandedBytes = uint64_t{16} << 20;
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";

struct StorageType {
  const char* global;
  const char* dtype;  // safetensors' spelling; nullptr: no Kestrel tensor type
  uint64_t element_size;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.HalfStorage", "F16", 2},  {"torch.FloatStorage", "F32", 4},   {"torch.DoubleStorage", "F64", 8},
    {"torch.BFloat16Storage", "BF16", 2}, {"torch.LongStorage", "I64", 8}, {"torch.IntStorage", "I32", 4},
    {"torch.ByteStorage", "U8", 1},   {"torch.BoolStorage", nullptr, 1},   {"torch.CharStorage", nullptr, 1},
    {"torch.ShortStorage", nullptr, 2},
};

const StorageType* storage_type(const std::string& global) {
  for (const StorageType& s : kStorageTypes)
    if (global == s.global) return &s;
  return nullptr;
}

const Value& arg(const Value& call, size_t i, Value::Kind kind, const std::string& where) {
  KESTREL_CHECK(call.args && call.args->items.size() > i && call.args->items[i]->is(kind), where,
                ": ", call.text, " record has no ", pickle::kind_name(kind), " argument ", i,
                "; the checkpoint is damaged");
  return *call.args->items[i];
}

std::vector<int64_t> int_tuple(const Value& v, const std::string& where) {
  std::vector<int64_t> out;
  for (const Value* x : v.items) {
    KESTREL_CHECK(x->is(Value::Kind::Int) && x->integer >= 0, where,
                  ": a tensor's size or stride is not a non-negative integer; the checkpoint is damaged");
    out.push_back(x->integer);
  }
  return out;
}

}  // namespace

bool is_torch_global(const std::string& name) {
  return name == kRebuildTensor || name == kRebuildParameter || name == "collections.OrderedDict" ||
         storage_type(name) != nullptr;
}

TorchFile TorchFile::parse(std::string bytes, const std::string& path, const pickle::GlobalPolicy& extra_globals) {
  TorchFile out;
  out.path_ = path;
  out.bytes_ = std::make_shared<const std::string>(std::move(bytes));
  out.zip_ = std::make_shared<const ZipArchive>(ZipArchive::parse(*out.bytes_, path));
  const ZipEntry* pickle_entry = nullptr;
  for (const ZipEntry& e : out.zip_->entries()) {
    const size_t slash = e.name.find('/');
    KESTREL_CHECK(!(slash != std::string::npos && e.name.compare(slash, std::string::npos, "/constants.pkl") == 0),
                  path, ": a TorchScript model (torch.jit.save), not a checkpoint; give the ",
                  "training checkpoint or released weights saved by torch.save (e.g. yolov5s.pt)");
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      KESTREL_CHECK(!pickle_entry, path, ": two data.pkl records; not one torch.save checkpoint");
      pickle_entry = &e;
    }
  }
  KESTREL_CHECK(pickle_entry, path, ": a zip archive without data.pkl: not a PyTorch checkpoint ",
                "(torch.save writes <name>/data.pkl); give a .pt or .safetensors file");
  out.prefix_ = pickle_entry->name.substr(0, pickle_entry->name.size() - std::strlen("data.pkl"));
  if (const ZipEntry* order = out.zip_->find(out.prefix_ + "byteorder"))
    KESTREL_CHECK(out.zip_->data(*order) == "little", path, ": saved on a big-endian machine (",
                  "byteorder '", out.zip_->data(*order), "'); re-save it on a little-endian one");
  const pickle::GlobalPolicy policy = [&](const std::string& name) {
    return is_torch_global(name) || extra_globals(name);
  };
  out.doc_ = std::make_shared<const pickle::Document>(
      pickle::parse(out.zip_->data(*pickle_entry), policy, path + ": " + pickle_entry->name));
  return out;
}

bool TorchFile::is_tensor(const Value& v) {
  return v.is(Value::Kind::Object) && (v.text == kRebuildTensor || v.text == kRebuildParameter);
}

TorchTensor TorchFile::tensor(const Value& v, const std::string& what) const {
  const std::string where = path_ + ": " + what;
  KESTREL_CHECK(is_tensor(v), where, " is a ", v.is(Value::Kind::Object) ? v.text : pickle::kind_name(v.kind),
                ", not a tensor; the checkpoint is damaged or not a YOLOv5 one");
  const Value& t = v.text == kRebuildParameter ? arg(v, 0, Value::Kind::Object, where) : v;
  KESTREL_CHECK(t.text == kRebuildTensor, where, ": a parameter that holds no tensor record");
  const Value& pid = arg(t, 0, Value::Kind::PersistentId, where);
  const Value& id = *pid.id;
  KESTREL_CHECK(id.is(Value::Kind::Tuple) && id.items.size() == 5 && id.items[0]->is(Value::Kind::String) &&
                    id.items[0]->text == "storage" && id.items[1]->is(Value::Kind::Global) &&
                    id.items[2]->is(Value::Kind::String) && id.items[4]->is(Value::Kind::Int),
                where, ": its storage reference is not ('storage', type, key, location, size)");
  const StorageType* type = storage_type(id.items[1]->text);
  KESTREL_CHECK(type && type->dtype, where, ": storage type ", id.items[1]->text, " has no Kestrel ",
                "tensor type (Kestrel reads Half, Float, Double, BFloat16, Long, Int and Byte storages)");
  const ZipEntry* data = zip_->find(prefix_ + "data/" + id.items[2]->text);
  KESTREL_CHECK(data, where, ": its storage '", id.items[2]->text, "' is missing from the archive");
  const uint64_t storage_elements = data->size / type->element_size;
  const int64_t offset = arg(t, 1, Value::Kind::Int, where).integer;
  const std::vector<int64_t> size = int_tuple(arg(t, 2, Value::Kind::Tuple, where), where);
  const std::vector<int64_t> stride = int_tuple(arg(t, 3, Value::Kind::Tuple, where), where);
  KESTREL_CHECK(offset >= 0 && size.size() == stride.size(), where, ": a bad storage offset or stride list");
  // The element count and the last element's index, checked for overflow and against the storage.
  uint64_t numel = 1, last = static_cast<uint64_t>(offset);
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  for (size_t d = 0; d < size.size(); ++d) {
    const uint64_t n = static_cast<uint64_t>(size[d]);
    KESTREL_CHECK(n == 0 || numel <= kLimit / n, where, ": a tensor of impossible size");
    numel *= n;
    if (n > 0) {
      const uint64_t s = static_cast<uint64_t>(stride[d]);
      KESTREL_CHECK(s == 0 || n - 1 <= (kLimit - last) / s, where, ": a tensor of impossible strides");
      last += (n - 1) * s;
    }
  }
  KESTREL_CHECK(numel == 0 || last < storage_elements, where, ": the tensor reaches element ", last,
                " of a storage of ", storage_elements, "; the checkpoint is damaged");
  // A view may repeat its storage's elements (stride 0: an expand()), and reading it copies every
  // one. Beyond the storage's own size that is allowed for small tensors only, so that a few bytes
  // of storage cannot declare gigabytes before any shape is checked.
  const uint64_t most = std::max<uint64_t>(data->size, kMaxExpandedBytes) / type->element_size;
  KESTREL_CHECK(numel <= most, where, ": the tensor declares ", numel, " elements over a storage of ", data->size,
                " bytes (strides that repeat its elements), past the ", kMaxExpandedBytes >> 20,
                " MiB a view may expand to; refused");
  TorchTensor out{type->dtype, std::vector<int64_t>(size.begin(), size.end()), std::string(numel * type->element_size, '\0')};
  const std::string_view src = zip_->data(*data);
  const uint64_t es = type->element_size;
  bool contiguous = true;  // what torch.save almost always holds: one copy
  for (size_t d = size.size(), expect = 1; d-- > 0; expect *= static_cast<size_t>(size[d]))
    contiguous = contiguous && (size[d] == 1 || static_cast<size_t>(stride[d]) == expect);
  if (contiguous) {
    if (numel > 0) std::memcpy(out.bytes.data(), src.data() + offset * es, numel * es);
    return out;
  }
  std::vector<int64_t> index(size.size(), 0);
  for (uint64_t i = 0; i < numel; ++i) {  // row-major walk of the view
    uint64_t element = static_cast<uint64_t>(offset);
    for (size_t d = 0; d < size.size(); ++d) element += static_cast<uint64_t>(index[d] * stride[d]);
    std::memcpy(out.bytes.data() + i * es, src.data() + element * es, es);
    for (size_t d = size.size(); d-- > 0;) {
      if (++index[d] < size[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace kestrel
