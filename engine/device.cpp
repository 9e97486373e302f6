#include "engine/device.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cctype>

#include "base/error.h"
#include "kernels/cuda_check.h"

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

namespace {

// An NVIDIA kernel driver is loaded when its control node or proc entry exists (WSL2 exposes
// the GPU through /dev/dxg instead). Without one a CUDA failure means "no GPU here"; with one it
// means a broken install.
bool nvidia_driver_present() {
  return ::access("/dev/nvidiactl", F_OK) == 0 ||
         ::access("/proc/driver/nvidia/version", F_OK) == 0 || ::access("/dev/dxg", F_OK) == 0;
}

}  // namespace

std::string cuda_init_problem(cudaError_t e, bool driver_present) {
  if (e == cudaSuccess || e == cudaErrorNoDevice || !driver_present) return "";
  return str("CUDA failed to initialise (", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
             ") although an NVIDIA driver is loaded. Check `nvidia-smi`, that the driver supports the CUDA ",
             CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
             " runtime Kestrel was built with, and CUDA_VISIBLE_DEVICES; or train on the CPU with --device cpu");
}

int cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  cudaGetLastError();  // clear the sticky error
  const std::string problem = cuda_init_problem(e, nvidia_driver_present());
  KESTREL_CHECK(problem.empty(), problem);
  return 0;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {

// cudaSetDevice, with a device that does not exist (cuda:1 on a one-GPU machine, or hidden by
// CUDA_VISIBLE_DEVICES) named as such rather than as CUDA's "invalid device ordinal".
void select_device(Device d) {
  const cudaError_t e = cudaSetDevice(d.index);
  if (e == cudaErrorInvalidDevice) {
    cudaGetLastError();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) cudaGetLastError();
    KESTREL_FAIL(d.str(), " does not exist: this machine shows ", n,
                 n == 1 ? " CUDA device (cuda:0)" : " CUDA devices",
                 n > 1 ? str(" (cuda:0..cuda:", n - 1, ")") : std::string(),
                 "; pick one of those, check CUDA_VISIBLE_DEVICES, or use --device cpu");
  }
  KESTREL_CUDA_CHECK(e);
}

}  // namespace

void set_thread_device(Device d) {
  if (d.is_cuda()) select_device(d);
}

DeviceGuard::DeviceGuard(Device d) {
  if (!d.is_cuda()) return;
  KESTREL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != d.index) select_device(d);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace kestrel
