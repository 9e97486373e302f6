// Memory for tensors. A caching allocator (engine/caching_allocator.h) keeps freed blocks per
// (device, stream) and hands them out again, so a steady-state training step makes no cudaMalloc
// calls. The same caching core serves pinned host memory and plain CPU memory (segments
// 256-byte aligned, as cudaMalloc's; blocks at 512-byte multiples within them).
//
// A CUDA device's allocator also keeps the private pools of CUDA graphs (engine/cuda_graph.h):
// while a stream allocates from a private pool (between allocator_begin_pool and
// allocator_end_pool), every allocation for that stream, by any thread whose current stream it
// is, comes from that pool.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/caching_allocator.h"
#include "engine/device.h"

namespace kestrel {

// A piece of memory owned by a tensor's storage: it returns itself to its allocator when dropped.
using DataPtr = std::shared_ptr<void>;

// Allocates `bytes` on `device` (on CUDA: for the device's current stream, keyed by its id). pinned=true gives
// page-locked host memory for asynchronous copies (CPU device only).
DataPtr allocate(Device device, size_t bytes, bool pinned = false);

// Stats and cache control of the allocator serving `device` (pinned=true: the pinned host pool).
AllocatorStats allocator_stats(Device device, bool pinned = false);
void allocator_reset_peak(Device device, bool pinned = false);
void allocator_empty_cache(Device device, bool pinned = false);
// Caps what the allocator serving `device` reserves from the system (0: no cap); see
// CachingAllocator::set_limit. For tests of the out-of-memory paths.
void allocator_set_limit(Device device, size_t bytes, bool pinned = false);

// Private pools of a CUDA device's allocator (see CachingAllocator's create_pool and the rest).
using PoolId = CachingAllocator::PoolId;
PoolId allocator_create_pool(Device device);
// `stream_id` is the stream's Stream::id().
void allocator_begin_pool(Device device, PoolId id, uint64_t stream_id);
void allocator_end_pool(Device device, PoolId id, uint64_t stream_id);
void allocator_release_pool(Device device, PoolId id);

// The stream `stream_id` of `device` has been destroyed; `work_done` tells when the work queued on
// it before has finished (CachingAllocator::retire_stream). Stream's owner calls it.
void allocator_retire_stream(Device device, uint64_t stream_id, std::function<bool()> work_done);
CachingAllocator::PoolStats allocator_pool_stats(Device device, PoolId id);

}  // namespace kestrel
