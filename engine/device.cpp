#include "engine/device.h"

#include <cuda_runtime.h>

#include <cctype>

#include "kernels/cuda_check.h"
#include "kernels/error.h"

namespace kestrel {

Device Device::parse(const std::string& text) {
  auto is_number = [](const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && is_number(text.substr(5))) return cuda(std::stoi(text.substr(5)));
  if (is_number(text)) return cuda(std::stoi(text));
  KESTREL_FAIL("invalid device '", text, "': use cpu, cuda, cuda:N or a GPU index N");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

DeviceGuard::DeviceGuard(Device d) {
  if (!d.is_cuda()) return;
  KESTREL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != d.index) KESTREL_CUDA_CHECK(cudaSetDevice(d.index));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace kestrel
