// CUDA streams and events, and the per-thread current stream of each device. On the CPU a stream
// is a stand-in: work runs synchronously and synchronize() returns at once.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "engine/device.h"

namespace kestrel {

class Stream {
 public:
  Stream() = default;  // the CPU stream
  // A new non-blocking stream on a CUDA device, owned by the returned object and its copies.
  static Stream create(Device device, int priority = 0);
  // The device's legacy default stream (not owned).
  static Stream default_stream(Device device);

  Device device() const { return device_; }
  cudaStream_t handle() const { return handle_; }
  // Never reused within the process (a destroyed stream's handle may be given to the next stream
  // the driver creates; its id is not): 0 for the default stream and the CPU stream, 1, 2, ...
  // for created ones. The caching allocator keys its blocks by it.
  uint64_t id() const { return id_; }
  void synchronize() const;
  bool operator==(const Stream& o) const { return device_ == o.device_ && id_ == o.id_; }

 private:
  Device device_ = Device::cpu();
  cudaStream_t handle_ = nullptr;
  uint64_t id_ = 0;
  std::shared_ptr<void> owner_;  // destroys the stream with the last copy
};

// The stream ops on `device` run on, for this thread (the default stream until set).
Stream current_stream(Device device);
void set_current_stream(const Stream& stream);

// Sets the current stream of its device for the scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

class Event {
 public:
  explicit Event(Device device, bool timing = false);
  void record(const Stream& stream);
  // Makes `stream` wait for this event's work without blocking the host.
  void wait(const Stream& stream) const;
  void synchronize() const;
  // Blocks the host until the event's work has finished, for a destructor about to reuse memory
  // that work used: not a host read (HostSyncGuard does not see it), never throws (a CUDA error
  // is reported on stderr and cleared).
  void wait_before_reuse() const noexcept;
  bool query() const;  // true once the recorded work has finished
  float elapsed_ms(const Event& end) const;
  cudaEvent_t handle() const { return handle_; }

 private:
  Device device_;
  cudaEvent_t handle_ = nullptr;
  std::shared_ptr<void> owner_;
};

}  // namespace kestrel
