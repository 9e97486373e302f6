// The caching logic behind every allocator of the engine, independent of where memory comes from
// (tested on the CPU with a counting backend), shaped like PyTorch's CUDA caching allocator:
//
// - Sizes are rounded up to multiples of 512 bytes.
// - Requests up to 1 MiB come from the small pool, carved out of 2 MiB segments; larger ones from
//   the large pool: 20 MiB segments for requests under 10 MiB, a segment of the request's own
//   size (rounded to 2 MiB) above that.
// - A request takes the smallest cached block of its pool and stream that fits (best fit) and
//   splits it: the remainder stays cached if it is at least 512 bytes (small pool) or more than
//   1 MiB (large pool); a freed block merges with free neighbours of its segment.
// - Blocks are kept per stream: a block freed by work on stream S is only reused by later work on
//   S, which the stream orders after the freeing work.
// - Out of memory: first the failing stream's wholly free segments go back to the system, then
//   every stream's; only then the request fails. (On CUDA, cudaFree synchronises the device
//   itself; releasing the failing stream's cache first keeps other streams' caches warm.)
// - empty_cache() returns every wholly free segment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace kestrel {

struct AllocatorStats {
  size_t allocated = 0;       // bytes in blocks handed out now
  size_t reserved = 0;        // bytes held from the system (segments: handed out + cached)
  size_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset
  size_t raw_allocs = 0;      // calls to the underlying system allocator
  size_t raw_frees = 0;
};

class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr when out of memory
  using RawFree = std::function<void(void*)>;

  static constexpr size_t kMinBlock = 512;           // rounding unit, smallest split remainder
  static constexpr size_t kSmallSize = 1 << 20;      // largest request of the small pool
  static constexpr size_t kSmallSegment = 2 << 20;   // segments of the small pool
  static constexpr size_t kLargeSegment = 20 << 20;  // segments for requests under kMinLargeAlone
  static constexpr size_t kMinLargeAlone = 10 << 20;
  static constexpr size_t kLargeRound = 2 << 20;     // rounding of segments above that

  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free);
  ~CachingAllocator();  // returns the cached segments (blocks still handed out are leaked)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes, uintptr_t stream_key);
  void deallocate(void* ptr);
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();

  // A request's block size, and the size of the segment a new block of that size comes from.
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block {
    char* ptr;
    size_t size;
    uintptr_t stream;
    bool small;       // which pool
    bool allocated = false;
    Block* prev = nullptr;  // neighbours within the segment, by address
    Block* next = nullptr;
  };
  // Pool order: stream, then size, then address (best fit = lower_bound).
  struct ByStreamSize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, ByStreamSize>;

  Block* find_cached(size_t size, uintptr_t stream, bool small);
  Block* new_segment(size_t size, uintptr_t stream, bool small);
  Block* split(Block* block, size_t size);
  // Frees wholly free segments (all of them, or only those of one stream); returns bytes freed.
  size_t release_free_segments(const uintptr_t* stream);
  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;                 // free blocks
  std::unordered_map<void*, Block*> allocated_;  // handed out, by address
  AllocatorStats stats_;
};

}  // namespace kestrel
