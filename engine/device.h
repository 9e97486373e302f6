// Where a tensor lives: the CPU or one CUDA device.
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace kestrel {

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;

  static Device cpu() { return {Kind::CPU, 0}; }
  static Device cuda(int i = 0) { return {Kind::CUDA, i}; }
  // "cpu", "cuda", "cuda:1", or a bare index "0" as the reference's --device accepts.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

// 0 where there is no GPU (no NVIDIA driver, or no device); throws where a driver is loaded but
// CUDA cannot initialise (a broken install must not look like "no GPU": GPU tests would skip and
// training would silently fall back to the CPU).
int cuda_device_count();
// What is wrong when cudaGetDeviceCount answered `e` ("" when nothing is: success, no device, or
// no driver at all).
std::string cuda_init_problem(cudaError_t e, bool driver_present);
bool cuda_available();

// Makes a CUDA device the calling thread's current device for good (no-op for the CPU): for a
// thread that works on one device (a watchdog, a staging worker). A DeviceGuard there would set
// the thread's previous device, 0, again at its end, and since CUDA 12 setting a device creates
// its context: every rank would hold one on GPU 0.
void set_thread_device(Device d);

// Makes a CUDA device current for the scope (no-op for the CPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device d);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace kestrel
