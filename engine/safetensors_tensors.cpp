#include "engine/safetensors_tensors.h"

#include <cstring>

#include "base/error.h"
#include "kernels/copy.h"

namespace kestrel {

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsRecord> records;
  records.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    KESTREL_CHECK(t.defined(), "save_safetensors('", path, "'): tensor '", name, "' is undefined");
    const Tensor* tensor = &t;
    records.push_back(SafetensorsRecord{
        name, safetensors_dtype_name(t.dtype()), t.shape(),
        static_cast<uint64_t>(t.numel()) * t.element_size(),
        [tensor](const std::function<void(const void*, size_t)>& sink) {
          // One tensor at a time on the host, detached so the copies are not recorded by autograd.
          Tensor host = tensor->detach().to(Device::cpu()).contiguous();
          sink(host.data_ptr(), static_cast<size_t>(host.numel()) * host.element_size());
        }});
  }
  write_safetensors(path, std::move(records), metadata);
}

Tensor safetensors_tensor(const SafetensorsFile& file, const std::string& name, Device device) {
  DType dtype;
  const SafetensorsEntry& e = file.checked_entry(name, &dtype, kernels::kMaxDims);
  Tensor host = Tensor::empty(e.shape, dtype);
  const std::string_view bytes = file.bytes(name);
  if (!bytes.empty()) std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
  return device.is_cpu() ? host : host.to(device);
}

}  // namespace kestrel
