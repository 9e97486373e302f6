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
// - Out of memory: first the failing stream's wholly free segments of the general pool go back to
//   the system, then every stream's; only then the request fails. (On CUDA, cudaFree synchronises the device
//   itself; releasing the failing stream's cache first keeps other streams' caches warm.)
// - empty_cache() returns every wholly free segment of the general pool.
// - Stream keys are identities that are never reused (Stream::id(), not the cudaStream_t, which
//   the driver may hand to the next stream created). A destroyed stream is retired with a
//   test of its last work (an event recorded before the destruction): its blocks are never handed
//   out again, and its wholly free segments go back to the system once that work is done, as
//   PyTorch frees a stream's blocks only after the events of their last uses. (empty_cache and
//   the out-of-memory release may return them earlier: on CUDA cudaFree waits for the device.)
//
// Private pools (for CUDA graphs, engine/cuda_graph.h): create_pool() names one; between
// begin_pool(id, stream) and end_pool(id, stream) every request on that stream is served from
// pool `id` only, from segments of its own. A block remembers its pool and goes back to it when
// freed, whenever that happens; the general pool never hands out a private pool's memory nor
// the other way round. Inside a pool the usual best fit, split and merge apply: a block freed
// during a capture is reused later in the same capture, which is correct because a replay runs
// the captured work in capture order. A live pool's segments stay reserved (empty_cache and the
// out-of-memory release leave them alone: a graph's replay writes to them) until
// release_pool(id): its wholly free segments go back to the system at once, the others when
// their last block is freed. While any pool is being filled (between begin_pool and end_pool)
// nothing goes back to the system, because on CUDA a cudaFree synchronises the device, which a
// capture forbids: a request that does not fit then takes a new segment or fails.
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
  // At most `bytes` reserved from the system (0: no limit): past it a new segment fails as the
  // system's allocator would when out of memory, so that tests reach the out-of-memory paths
  // (release and retry, the error during a capture) on any machine.
  void set_limit(size_t bytes);

  // The stream `stream_key` is gone: no request will name it again. `work_done` says whether the
  // work queued on it before it went has finished (on CUDA: an event recorded then); until it
  // does, the stream's blocks stay where they are, and after it its wholly free segments (and
  // each segment that becomes wholly free later) go back to the system. Checked when memory is
  // needed, on empty_cache(), and when one of the stream's blocks is freed.
  void retire_stream(uintptr_t stream_key, std::function<bool()> work_done);
  size_t retired_streams() const;  // retired streams whose blocks are not all back yet
  AllocatorStats stats() const;  // every pool, private ones included
  void reset_peak();

  // Private pools; the general pool is kGeneralPool.
  using PoolId = uint64_t;
  static constexpr PoolId kGeneralPool = 0;
  struct PoolStats {
    size_t allocated = 0;  // bytes of the pool's blocks handed out now
    size_t reserved = 0;   // bytes of the pool's segments
  };
  PoolId create_pool();
  // Routes requests on `stream_key` to pool `id` until end_pool(id, stream_key). A stream routes
  // to one pool at a time; a pool may take several streams.
  void begin_pool(PoolId id, uintptr_t stream_key);
  void end_pool(PoolId id, uintptr_t stream_key);
  // The pool's owner is gone: no stream may route to it any more; its wholly free segments go
  // back to the system now (after the last end_pool if a capture is under way), the others when
  // their last block is freed.
  void release_pool(PoolId id);
  PoolStats pool_stats(PoolId id) const;

  // A request's block size, and the size of the segment a new block of that size comes from.
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block {
    char* ptr;
    size_t size;
    uintptr_t stream;
    bool small;       // which size class
    PoolId pool = kGeneralPool;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours within the segment, by address
    Block* next = nullptr;
  };
  // Free-block order: pool, stream, then size, then address (best fit = lower_bound).
  struct ByStreamSize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, ByStreamSize>;
  struct PrivatePool {
    int routes = 0;         // streams routed to it now
    bool released = false;  // its owner is gone
    size_t segments = 0;
    PoolStats stats;
  };

  Block* find_cached(size_t size, uintptr_t stream, bool small, PoolId pool);
  Block* new_segment(size_t size, uintptr_t stream, bool small, PoolId pool);
  Block* split(Block* block, size_t size);
  void free_segment(Block* segment);  // back to the system
  // Frees the wholly free segments `pick` chooses; returns the bytes freed. Callers check that no
  // pool is being filled (filling_ == 0) first, except the destructor.
  size_t release_where(const std::function<bool(const Block*)>& pick);
  bool released_pool(const Block* b) const;  // of a private pool whose owner is gone
  // Retired streams whose work is done give their wholly free general segments back; those left
  // with no general block are forgotten. Nothing while a pool is being filled.
  void settle_retired();
  PrivatePool& live_pool(PoolId id, const char* op);
  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }

  void* raw_alloc(size_t bytes);  // raw_alloc_ within limit_

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  size_t limit_ = 0;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;                 // free blocks
  std::unordered_map<void*, Block*> allocated_;  // handed out, by address
  AllocatorStats stats_;
  PoolId next_pool_ = 1;
  std::unordered_map<PoolId, PrivatePool> private_pools_;  // until released and empty
  std::unordered_map<uintptr_t, PoolId> routes_;            // stream -> private pool
  struct Retired {
    std::function<bool()> work_done;
    bool done = false;
  };
  std::unordered_map<uintptr_t, Retired> retired_;          // streams gone, blocks not all back
  int filling_ = 0;                                         // routes in place (all pools)
};

}  // namespace kestrel
