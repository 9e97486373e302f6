// The caching logic with a counting backend: rounding and segment sizes, small and large pools,
// splitting and merging, reuse per stream, stats, empty_cache, the out-of-memory order.
#include "engine/allocator.h"

#include <cstdlib>
#include <map>
#include <set>
#include <vector>

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

constexpr size_t MiB = 1 << 20;

TEST(CachingAllocator, RoundsLikeAProductionCachingAllocator) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(3 * MiB + 1), 3 * MiB + 512);  // no 2 MiB rounding
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);            // small pool
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);     // shared large segment
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);      // its own, 2 MiB rounded
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameStream) {
  CountingBackend backend;
  {
    CachingAllocator alloc = backend.make();
    void* a = alloc.allocate(1000, 1);
    alloc.deallocate(a);
    void* b = alloc.allocate(900, 1);  // the same 1024-byte place of the same segment
    EXPECT_EQ(a, b);
    EXPECT_EQ(backend.allocs, 1);
    void* c = alloc.allocate(1000, 2);  // another stream never gets stream 1's blocks
    EXPECT_NE(c, b);
    EXPECT_EQ(backend.allocs, 2);
    alloc.deallocate(b);
    alloc.deallocate(c);
  }
  EXPECT_EQ(backend.frees, 2) << "destruction returns cached segments";
  EXPECT_TRUE(backend.live.empty());
}

// Small requests are carved out of one 2 MiB segment, side by side at 512-byte multiples.
TEST(CachingAllocator, SmallRequestsShareASegment) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  std::vector<char*> p;
  for (size_t n : {100, 600, 512, 4000}) p.push_back(static_cast<char*>(alloc.allocate(n, 0)));
  EXPECT_EQ(backend.allocs, 1);
  EXPECT_EQ(p[1] - p[0], 512);
  EXPECT_EQ(p[2] - p[1], 1024);
  EXPECT_EQ(p[3] - p[2], 512);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 512u + 1024 + 512 + 4096);
  EXPECT_EQ(s.reserved, 2 * MiB);
  for (char* q : p) alloc.deallocate(q);
  alloc.empty_cache();  // all merged back into one free segment: returned
  EXPECT_EQ(backend.frees, 1);
  EXPECT_EQ(alloc.stats().reserved, 0u);
}

// A large cached block is split for a smaller request (no "within 2x" rule, no waste), the
// remainder stays cached, and freed neighbours merge back so the whole block serves again.
TEST(CachingAllocator, SplitsLargeBlocksAndMergesThemBack) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  char* big = static_cast<char*>(alloc.allocate(64 * MiB, 0));
  alloc.deallocate(big);
  char* a = static_cast<char*>(alloc.allocate(2 * MiB, 0));
  char* b = static_cast<char*>(alloc.allocate(3 * MiB, 0));
  EXPECT_EQ(a, big);
  EXPECT_EQ(b, big + 2 * MiB);
  EXPECT_EQ(backend.allocs, 1);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 5 * MiB);
  EXPECT_EQ(s.reserved, 64 * MiB);
  alloc.deallocate(a);
  alloc.empty_cache();  // the segment is still partly in use: kept
  EXPECT_EQ(alloc.stats().reserved, 64 * MiB);
  alloc.deallocate(b);
  void* whole = alloc.allocate(64 * MiB, 0);  // everything merged: the same block, no new memory
  EXPECT_EQ(whole, big);
  EXPECT_EQ(backend.allocs, 1);
  alloc.deallocate(whole);
  // A remainder of at most 1 MiB is not split off a large block: it goes with it.
  char* c = static_cast<char*>(alloc.allocate(64 * MiB - MiB, 0));
  EXPECT_EQ(alloc.stats().allocated, 64 * MiB);
  alloc.deallocate(c);
}

// Requests between 1 and 10 MiB share 20 MiB segments; a steady state asks for nothing new.
TEST(CachingAllocator, SteadyStateMakesNoRawAllocations) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  const size_t sizes[] = {4 * MiB, 1000, 3 * MiB, 64, 5 * MiB, 12 * MiB};
  size_t after_first = 0;
  for (int step = 0; step < 5; ++step) {
    std::vector<void*> held;
    for (size_t s : sizes) held.push_back(alloc.allocate(s, 7));
    for (void* p : held) alloc.deallocate(p);
    if (step == 0) after_first = alloc.stats().raw_allocs;
  }
  EXPECT_EQ(after_first, 3u) << "one small segment, one shared 20 MiB, one of 12 MiB";
  EXPECT_EQ(alloc.stats().raw_allocs, after_first);
}

TEST(CachingAllocator, StatsTrackAllocatedReservedAndPeak) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  void* a = alloc.allocate(512, 0);
  void* b = alloc.allocate(3 * MiB, 0);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 512u + 3 * MiB);
  EXPECT_EQ(s.reserved, 2 * MiB + 20 * MiB);
  alloc.deallocate(b);
  s = alloc.stats();
  EXPECT_EQ(s.allocated, 512u);
  EXPECT_EQ(s.reserved, 22 * MiB);
  EXPECT_EQ(s.peak_allocated, 512u + 3 * MiB);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_allocated, 512u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved, 2 * MiB);
  EXPECT_EQ(alloc.stats().raw_frees, 1u);
  alloc.deallocate(a);
}

// Out of memory, the failing stream's cached segments go back first (another stream's cache
// survives); only if that is not enough, everyone's; then the request fails.
TEST(CachingAllocator, OutOfMemoryReleasesTheFailingStreamsCacheFirst) {
  size_t budget = 80 * MiB, live = 0;
  std::map<void*, size_t> sizes;
  CachingAllocator alloc(
      [&](size_t n) -> void* {
        if (live + n > budget) return nullptr;
        live += n;
        void* p = std::malloc(n);
        sizes[p] = n;
        return p;
      },
      [&](void* p) {
        live -= sizes.at(p);
        sizes.erase(p);
        std::free(p);
      });
  void* a = alloc.allocate(30 * MiB, 1);
  void* b = alloc.allocate(30 * MiB, 0);
  alloc.deallocate(a);  // cached on stream 1
  alloc.deallocate(b);  // cached on stream 0
  void* c = alloc.allocate(40 * MiB, 1);  // 100 MiB > 80: stream 1's 30 MiB goes back
  EXPECT_EQ(alloc.stats().raw_frees, 1u);
  EXPECT_EQ(alloc.stats().reserved, 70 * MiB);
  void* d = alloc.allocate(30 * MiB, 0);  // stream 0's cache survived
  EXPECT_EQ(d, b);
  EXPECT_EQ(alloc.stats().raw_allocs, 3u);
  alloc.deallocate(d);
  void* e = alloc.allocate(40 * MiB, 1);  // stream 1 has nothing cached: everyone's goes back
  EXPECT_EQ(alloc.stats().raw_frees, 2u);
  try {
    alloc.allocate(40 * MiB, 1);
    ADD_FAILURE() << "allocated past the budget";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("out of memory"), std::string::npos) << err.what();
  }
  alloc.deallocate(c);
  alloc.deallocate(e);
}

TEST(CachingAllocator, RefusesForeignPointers) {
  CountingBackend backend;
  CachingAllocator alloc = backend.make();
  int x = 0;
  EXPECT_THROW(alloc.deallocate(&x), Error);
}

TEST(CpuAllocator, AlignedAndWritable) {
  DataPtr p = allocate(Device::cpu(), 1000);
  DataPtr q = allocate(Device::cpu(), 24);  // its neighbour in the same segment
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q.get()) % 256, 0u);
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
  const size_t reserved = allocator_stats(Device::cpu()).reserved;
  allocator_empty_cache(Device::cpu());  // the 6 MiB block's wholly free segment goes back
  EXPECT_LE(allocator_stats(Device::cpu()).reserved + 20 * MiB, reserved);
}
