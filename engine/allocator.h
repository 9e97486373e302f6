// Memory for tensors. A caching allocator keeps freed blocks per (device, stream) and hands them
// out again, so a steady-state training step makes no cudaMalloc calls. The same caching core
// serves pinned host memory and plain CPU memory (64-byte aligned).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "engine/device.h"

namespace kestrel {

struct AllocatorStats {
  size_t allocated = 0;       // bytes in blocks handed out now
  size_t reserved = 0;        // bytes held from the system (handed out + cached)
  size_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset
  size_t raw_allocs = 0;      // calls to the underlying system allocator
  size_t raw_frees = 0;
};

// The caching logic, independent of where memory comes from (tested on the CPU with a counting
// backend). Blocks are cached per stream key: a block freed by work on stream S is only reused by
// later work on S, which is ordered after the freeing work.
class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr when out of memory
  using RawFree = std::function<void(void*)>;
  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes, uintptr_t stream_key);
  void deallocate(void* ptr);
  void empty_cache();  // returns every cached block to the system
  AllocatorStats stats() const;
  void reset_peak();

  // Sizes are rounded up: small requests to 512 B, large ones to 2 MiB, so repeated shapes map
  // to identical blocks.
  static size_t round_size(size_t bytes);

 private:
  struct Block {
    size_t size;
    uintptr_t stream;
  };
  void release_cached_locked();

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> in_use_;
  std::multimap<std::pair<uintptr_t, size_t>, void*> cached_;  // (stream, size) -> block
  std::unordered_map<void*, size_t> cached_size_;
  AllocatorStats stats_;
};

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
