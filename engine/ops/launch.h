// The one place an op chooses between its CPU and CUDA kernels, and where a CUDA launch gets its
// device and stream. Callers pass both forms and never branch on the device themselves:
//
//   ops::launch(x.device(),
//               [&] { kernels::foo_cpu(...); },
//               [&](cudaStream_t s) { kernels::foo_cuda(..., s); });
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/device.h"
#include "engine/stream.h"
#include "engine/tensor.h"

namespace kestrel::ops {

// The current stream of a device, or of t's device (nullptr on the CPU): where ops launch.
inline cudaStream_t stream_of(Device d) { return current_stream(d).handle(); }
inline cudaStream_t stream_of(const Tensor& t) { return stream_of(t.device()); }

// Runs cpu_fn() on the host when `on` is the CPU; otherwise cuda_fn(stream) with `on` the current
// CUDA device for the call and `stream` its current stream. Both forms return the same type,
// which launch returns.
template <class CpuFn, class CudaFn>
std::invoke_result_t<CpuFn&> launch(Device on, CpuFn&& cpu_fn, CudaFn&& cuda_fn) {
  static_assert(std::is_same_v<std::invoke_result_t<CpuFn&>,
                               std::invoke_result_t<CudaFn&, cudaStream_t>>,
                "ops::launch: the CPU and CUDA forms must return the same type");
  if (on.is_cpu()) return cpu_fn();
  DeviceGuard guard(on);
  return cuda_fn(stream_of(on));
}

}  // namespace kestrel::ops
