// Memory for tensors. A caching allocator (engine/caching_allocator.h) keeps freed blocks per
// (device, stream) and hands them out again, so a steady-state training step makes no cudaMalloc
// calls. The same caching core serves pinned host memory and plain CPU memory (segments
// 256-byte aligned, as cudaMalloc's; blocks at 512-byte multiples within them).
#pragma once
#include <cstddef>
#include <memory>

#include "engine/caching_allocator.h"
#include "engine/device.h"

namespace kestrel {

// A piece of memory owned by a tensor's storage: it returns itself to its allocator when dropped.
using DataPtr = std::shared_ptr<void>;

// Allocates `bytes` on `device` (on CUDA: for the device's current stream). pinned=true gives
// page-locked host memory for asynchronous copies (CPU device only).
DataPtr allocate(Device device, size_t bytes, bool pinned = false);

// Stats and cache control of the allocator serving `device` (pinned=true: the pinned host pool).
AllocatorStats allocator_stats(Device device, bool pinned = false);
void allocator_reset_peak(Device device, bool pinned = false);
void allocator_empty_cache(Device device, bool pinned = false);

}  // namespace kestrel
