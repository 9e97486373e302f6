// The caching logic with a counting backend: reuse per stream, size rounding, stats, empty_cache.
#include "engine/allocator.h"

#include <cstdlib>
#include <set>

#include "tests/support/testing.h"

using namespace kestrel;

namespace {

struct CountingBackend {
  int allocs = 0, frees = 0;
  std::set<void*> live;
  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t n) {
          ++allocs;
          void* p = std::malloc(n);
          live.insert(p);
          return p;
        },
        [this](void* p) {
          ++frees;
          live.erase(p);
          std::free(p);
        });
  }
};

}  // namespace

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameStream) {
  CountingBackend backend;
  {
    CachingAllocator alloc = backend.make();
    void* a = alloc.allocate(1000, 1);
    alloc.deallocate(a);
    void* b = alloc.allocate(900, 1);  // rounds to the same 1024-byte block
    EXPECT_EQ(a, b);
    EXPECT_EQ(backend.allocs, 1);
    void* c = alloc.allocate(1000, 2);  // another stream never gets stream 1's blocks
    EXPECT_NE(c, b);
    EXPECT_EQ(backend.allocs, 2);
    alloc.deallocate(b);
    alloc.deallocate(c);
  }
  EXPECT_EQ(backend.frees, 2) << "destruction returns cached blocks";
  EXPECT_TRUE(backend.live.empty());
}

TEST(CachingAllocator, SteadyStateMakesNoRawAllocations) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  const size_t sizes[] = {4 << 20, 1000, 3 << 20, 64, 5 << 20};
  for (int step = 0; step < 5; ++step) {
    std::vector<void*> held;
    for (size_t s : sizes) held.push_back(alloc.allocate(s, 7));
    for (void* p : held) alloc.deallocate(p);
  }
  EXPECT_EQ(alloc.stats().raw_allocs, 5u);
  EXPECT_EQ(backend.allocs, 5);
}

TEST(CachingAllocator, StatsTrackAllocatedReservedAndPeak) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  void* a = alloc.allocate(512, 0);
  void* b = alloc.allocate(3 << 20, 0);  // rounded to 4 MiB
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 512u + (4u << 20));
  EXPECT_EQ(s.reserved, s.allocated);
  alloc.deallocate(b);
  s = alloc.stats();
  EXPECT_EQ(s.allocated, 512u);
  EXPECT_EQ(s.reserved, 512u + (4u << 20));
  EXPECT_EQ(s.peak_allocated, 512u + (4u << 20));
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_allocated, 512u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved, 512u);
  EXPECT_EQ(alloc.stats().raw_frees, 1u);
  alloc.deallocate(a);
}

TEST(CachingAllocator, DoesNotHandOutMuchLargerBlocks) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  void* big = alloc.allocate(64 << 20, 0);
  alloc.deallocate(big);
  void* small = alloc.allocate(2 << 20, 0);  // a 64 MiB block would waste 62 MiB
  EXPECT_NE(small, big);
  alloc.deallocate(small);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  int budget = 2;  // the backend can hold two blocks at a time
  int live = 0;
  CachingAllocator alloc(
      [&](size_t n) -> void* {
        if (live == budget) return nullptr;
        ++live;
        return std::malloc(n);
      },
      [&](void* p) {
        --live;
        std::free(p);
      });
  void* a = alloc.allocate(100, 0);
  void* b = alloc.allocate(100, 1);
  alloc.deallocate(a);  // cached on stream 0
  void* c = alloc.allocate(100, 1);  // stream 1 can't reuse it: cache is released, then retried
  EXPECT_NE(c, nullptr);
  void* d = nullptr;
  EXPECT_THROW(d = alloc.allocate(100, 1), Error);
  alloc.deallocate(b);
  alloc.deallocate(c);
  (void)d;
}

TEST(CachingAllocator, RefusesForeignPointers) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  int x = 0;
  EXPECT_THROW(alloc.deallocate(&x), Error);
}

TEST(CpuAllocator, AlignedAndWritable) {
  DataPtr p = allocate(Device::cpu(), 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u);
  static_cast<char*>(p.get())[999] = 1;
}

// Host tensors are cached too: a training step that frees and re-allocates the same shapes asks
// the system for no new memory (each fresh large block would cost a page fault per 4 KiB).
TEST(CpuAllocator, SteadyStateReusesHostBlocks) {
  const size_t bytes = 6 << 20;
  { DataPtr warm = allocate(Device::cpu(), bytes); }
  const size_t raw = allocator_stats(Device::cpu()).raw_allocs;
  for (int i = 0; i < 10; ++i) {
    DataPtr a = allocate(Device::cpu(), bytes);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
  }
  EXPECT_EQ(allocator_stats(Device::cpu()).raw_allocs, raw);
  allocator_empty_cache(Device::cpu());
  EXPECT_EQ(allocator_stats(Device::cpu()).reserved, allocator_stats(Device::cpu()).allocated);
}
