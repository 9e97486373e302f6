// For CUDA tests: holds a stream for `ms` milliseconds with a host function, so work queued
// behind it waits (stream ordering, upload overlap and the watchdog become visible).
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "engine/stream.h"

namespace kestrel::testing {

inline void block_stream(const Stream& s, int ms) {
  auto* delay = new int(ms);
  KESTREL_CHECK(cudaLaunchHostFunc(
                    s.handle(),
                    [](void* p) {
                      std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(p)));
                      delete static_cast<int*>(p);
                    },
                    delay) == cudaSuccess,
                "cudaLaunchHostFunc failed");
}

}  // namespace kestrel::testing
