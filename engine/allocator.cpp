#include "engine/allocator.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "engine/cuda_graph.h"
#include "engine/stream.h"
#include "kernels/cuda_check.h"

namespace kestrel {

namespace {

// What cudaMalloc guarantees too, so that layouts aligned within a buffer (the gradient buckets'
// 256-byte boundaries) are aligned in memory on every device; a multiple of the cache line.
constexpr size_t kHostAlign = 256;

// The process's allocators: one per CUDA device and one for pinned host memory. They live for the
// whole process (like the devices they serve) and are created on first use.
class AllocatorRegistry {
 public:
  static AllocatorRegistry& get() {
    static AllocatorRegistry* registry = new AllocatorRegistry();  // never destroyed: tensors in
    return *registry;  // static objects may free after main returns
  }

  CachingAllocator& cuda(int index) {
    std::lock_guard lock(mutex_);
    auto& slot = cuda_[index];
    if (!slot) {
      slot = std::make_unique<CachingAllocator>(
          [index](size_t n) -> void* {
            DeviceGuard guard(Device::cuda(index));
            // A new segment of a graph's pool may be needed during a capture on this thread:
            // cudaMalloc is not captured, and the segment outlives the graph (engine/cuda_graph.h).
            RelaxedCaptureMode relaxed;
            void* p = nullptr;
            const cudaError_t e = cudaMalloc(&p, n);
            if (e == cudaErrorMemoryAllocation) {  // out of memory: clear it, let the caller retry
              cudaGetLastError();
              return nullptr;
            }
            // Anything else (a sticky error from an earlier faulting kernel) is not out of memory
            // and must not be reported as such.
            KESTREL_CUDA_CHECK(e);
            return p;
          },
          [index](void* p) {
            DeviceGuard guard(Device::cuda(index));
            cudaFree(p);
          });
    }
    return *slot;
  }

  // Plain host memory goes through the same cache: glibc serves large blocks by mmap, and each
  // fresh block costs a page fault per 4 KiB on first touch (5 % of a CPU training step).
  CachingAllocator& cpu() {
    std::lock_guard lock(mutex_);
    if (!cpu_)
      cpu_ = std::make_unique<CachingAllocator>(
          [](size_t n) -> void* { return std::aligned_alloc(kHostAlign, (n + kHostAlign - 1) / kHostAlign * kHostAlign); },
          [](void* p) { std::free(p); });
    return *cpu_;
  }

  CachingAllocator& pinned() {
    std::lock_guard lock(mutex_);
    if (!pinned_) {
      pinned_ = std::make_unique<CachingAllocator>(
          [](size_t n) -> void* {
            void* p = nullptr;
            RelaxedCaptureMode relaxed;  // not captured; allowed while this thread captures
            // Portable: usable by every device's context, whichever device the allocating thread has.
            const cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
            if (e == cudaErrorMemoryAllocation) {
              cudaGetLastError();
              return nullptr;
            }
            KESTREL_CUDA_CHECK(e);
            return p;
          },
          [](void* p) { cudaFreeHost(p); });
    }
    return *pinned_;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int, std::unique_ptr<CachingAllocator>> cuda_;
  std::unique_ptr<CachingAllocator> pinned_, cpu_;
};

}  // namespace

DataPtr allocate(Device device, size_t bytes, bool pinned) {
  if (device.is_cuda()) {
    KESTREL_CHECK(!pinned, "pinned memory is host memory: allocate it on the cpu device");
    CachingAllocator& alloc = AllocatorRegistry::get().cuda(device.index);
    const auto key = static_cast<uintptr_t>(current_stream(device).id());
    void* p = alloc.allocate(bytes, key);
    return DataPtr(p, [&alloc](void* q) { alloc.deallocate(q); });
  }
  if (pinned) {
    KESTREL_CHECK(cuda_available(), "pinned host memory needs a CUDA device");
    // A pinned block goes back to the pool only once asynchronous copies reading or writing it
    // have finished: Storage waits for its last asynchronous use before releasing its memory.
    CachingAllocator& alloc = AllocatorRegistry::get().pinned();
    void* p = alloc.allocate(bytes, 0);
    return DataPtr(p, [&alloc](void* q) { alloc.deallocate(q); });
  }
  CachingAllocator& alloc = AllocatorRegistry::get().cpu();
  void* p = alloc.allocate(bytes, 0);
  return DataPtr(p, [&alloc](void* q) { alloc.deallocate(q); });
}

AllocatorStats allocator_stats(Device device, bool pinned) {
  if (device.is_cuda()) return AllocatorRegistry::get().cuda(device.index).stats();
  return pinned ? AllocatorRegistry::get().pinned().stats() : AllocatorRegistry::get().cpu().stats();
}

void allocator_reset_peak(Device device, bool pinned) {
  if (device.is_cuda()) return AllocatorRegistry::get().cuda(device.index).reset_peak();
  if (pinned) return AllocatorRegistry::get().pinned().reset_peak();
  AllocatorRegistry::get().cpu().reset_peak();
}

void allocator_empty_cache(Device device, bool pinned) {
  if (device.is_cuda()) return AllocatorRegistry::get().cuda(device.index).empty_cache();
  if (pinned) return AllocatorRegistry::get().pinned().empty_cache();
  AllocatorRegistry::get().cpu().empty_cache();
}

void allocator_set_limit(Device device, size_t bytes, bool pinned) {
  if (device.is_cuda()) return AllocatorRegistry::get().cuda(device.index).set_limit(bytes);
  if (pinned) return AllocatorRegistry::get().pinned().set_limit(bytes);
  AllocatorRegistry::get().cpu().set_limit(bytes);
}

namespace {

CachingAllocator& cuda_allocator(Device device, const char* op) {
  KESTREL_CHECK(device.is_cuda(), op, ": private pools are for CUDA graphs, on a CUDA device; got ",
                device.str());
  return AllocatorRegistry::get().cuda(device.index);
}

}  // namespace

PoolId allocator_create_pool(Device device) {
  return cuda_allocator(device, "allocator_create_pool").create_pool();
}

void allocator_begin_pool(Device device, PoolId id, uint64_t stream_id) {
  cuda_allocator(device, "allocator_begin_pool").begin_pool(id, static_cast<uintptr_t>(stream_id));
}

void allocator_end_pool(Device device, PoolId id, uint64_t stream_id) {
  cuda_allocator(device, "allocator_end_pool").end_pool(id, static_cast<uintptr_t>(stream_id));
}

void allocator_retire_stream(Device device, uint64_t stream_id, std::function<bool()> work_done) {
  cuda_allocator(device, "allocator_retire_stream")
      .retire_stream(static_cast<uintptr_t>(stream_id), std::move(work_done));
}

void allocator_release_pool(Device device, PoolId id) {
  cuda_allocator(device, "allocator_release_pool").release_pool(id);
}

CachingAllocator::PoolStats allocator_pool_stats(Device device, PoolId id) {
  return cuda_allocator(device, "allocator_pool_stats").pool_stats(id);
}

}  // namespace kestrel
