// The memory behind one or more tensors (views share a Storage).
#pragma once
#include <cstddef>
#include <optional>

#include "engine/allocator.h"
#include "engine/cuda_graph.h"
#include "engine/device.h"
#include "engine/stream.h"

namespace kestrel {

struct Storage {
  Storage(Device device, size_t nbytes, bool pinned = false)
      : device(device), nbytes(nbytes), pinned(pinned), data(allocate(device, nbytes, pinned)) {}
  ~Storage() {
    // Pinned memory in flight in an asynchronous copy must not go back to the pool before the
    // copy has finished. The copy was enqueued outside any CUDA graph capture (copy_ refuses host
    // copies during one), so waiting for it is legal even if this thread is capturing now (a
    // pinned batch dropped inside a captured step): the relaxed mode lets the thread wait. The
    // wait reads no value, so a HostSyncGuard that throws does not see it (a destructor must not
    // throw).
    if (last_async_use) {
      RelaxedCaptureMode relaxed;
      last_async_use->wait_before_reuse();
    }
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device;
  size_t nbytes;
  bool pinned;
  DataPtr data;
  std::optional<Event> last_async_use;
};

}  // namespace kestrel
