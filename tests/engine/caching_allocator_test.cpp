// Private pools of the caching allocator (what CUDA graphs allocate from), with a counting
// backend: routing per stream, no reuse across pools, reuse within a capture, release of a pool
// (at once, or at its last block), empty_cache and out of memory leaving live pools alone, stats.
#include "engine/caching_allocator.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tests/support/testing.h"

using namespace kestrel;

namespace {

constexpr size_t MiB = 1 << 20;
using PoolId = CachingAllocator::PoolId;

// malloc with a budget (bytes), counting calls and remembering each segment's range.
struct Backend {
  size_t budget = SIZE_MAX, live = 0;
  int allocs = 0, frees = 0;
  std::map<char*, size_t> segments;
  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t n) -> void* {
          if (live + n > budget) return nullptr;
          ++allocs;
          live += n;
          char* p = static_cast<char*>(std::malloc(n));
          segments[p] = n;
          return p;
        },
        [this](void* p) {
          ++frees;
          live -= segments.at(static_cast<char*>(p));
          segments.erase(static_cast<char*>(p));
          std::free(p);
        });
  }
  char* segment_of(void* p) const {
    for (const auto& [base, n] : segments)
      if (static_cast<char*>(p) >= base && static_cast<char*>(p) < base + n) return base;
    return nullptr;
  }
};

}  // namespace

// While a stream routes to a pool, its requests come from the pool's own segments even where the
// general pool has a fitting block cached for that stream; other streams are unaffected.
TEST(PrivatePool, RoutesTheStreamsRequestsToThePool) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  void* general = alloc.allocate(1000, 7);
  alloc.deallocate(general);  // cached for stream 7 in the general pool
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 7);
  void* a = alloc.allocate(1000, 7);
  EXPECT_NE(backend.segment_of(a), backend.segment_of(general));
  EXPECT_EQ(backend.allocs, 2);
  void* other = alloc.allocate(1000, 8);  // stream 8 still allocates from the general pool
  EXPECT_EQ(alloc.pool_stats(pool).allocated, 1024u);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 2 * MiB);
  alloc.end_pool(pool, 7);
  void* b = alloc.allocate(1000, 7);  // routing ended: the general pool's cached block again
  EXPECT_EQ(b, general);
  for (void* p : {a, other, b}) alloc.deallocate(p);
  alloc.release_pool(pool);
}

// A block freed during the capture goes back to the pool and serves a later request of the same
// capture (replays run the work in capture order), with no new segment.
TEST(PrivatePool, ReusesBlocksFreedDuringTheCapture) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 3);
  void* a = alloc.allocate(4 * MiB, 3);
  void* small = alloc.allocate(100, 3);
  alloc.deallocate(a);
  void* b = alloc.allocate(3 * MiB, 3);  // best fit inside the pool: a's place, split
  EXPECT_EQ(b, a);
  alloc.deallocate(b);
  void* c = alloc.allocate(4 * MiB, 3);  // merged back
  EXPECT_EQ(c, a);
  EXPECT_EQ(alloc.stats().raw_allocs, 2u) << "one 20 MiB and one small segment";
  alloc.deallocate(c);
  alloc.deallocate(small);
  alloc.end_pool(pool, 3);
  alloc.release_pool(pool);
}

// After the capture, general requests never get the pool's memory, even when it is all free and
// fits, and a block of the pool freed after the capture goes back to the pool, not the general one.
TEST(PrivatePool, GeneralRequestsNeverGetPoolMemory) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 1);
  void* out = alloc.allocate(2 * MiB, 1);      // a graph output, alive after the capture
  void* scratch = alloc.allocate(5 * MiB, 1);  // freed inside the capture
  alloc.deallocate(scratch);
  alloc.end_pool(pool, 1);
  char* pool_segment = backend.segment_of(out);
  alloc.deallocate(out);  // back to the pool
  std::vector<void*> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(alloc.allocate(2 * MiB, 1));
    EXPECT_NE(backend.segment_of(held.back()), pool_segment) << i;
  }
  EXPECT_EQ(alloc.pool_stats(pool).allocated, 0u);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 20 * MiB);
  for (void* p : held) alloc.deallocate(p);
  // A later capture into the same pool (another graph sharing it) reuses its memory.
  const int allocs = backend.allocs;
  alloc.begin_pool(pool, 1);
  void* again = alloc.allocate(7 * MiB, 1);
  EXPECT_EQ(backend.segment_of(again), pool_segment);
  EXPECT_EQ(backend.allocs, allocs);
  alloc.deallocate(again);
  alloc.end_pool(pool, 1);
  alloc.release_pool(pool);
}

// Blocks stay per stream inside a pool too: a block freed by one stream's work is not handed to
// another stream of the same capture, which is not ordered after that work.
TEST(PrivatePool, KeepsBlocksPerStreamWithinThePool) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 1);
  alloc.begin_pool(pool, 2);
  void* a = alloc.allocate(1000, 1);
  alloc.deallocate(a);
  void* b = alloc.allocate(1000, 2);
  EXPECT_NE(b, a);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 4 * MiB);
  alloc.deallocate(b);
  alloc.end_pool(pool, 1);
  alloc.end_pool(pool, 2);
  alloc.release_pool(pool);
}

// Releasing a pool returns its wholly free segments at once; a segment with a live block (a graph
// output someone still holds) goes back when that block is freed, and never serves anyone again.
TEST(PrivatePool, ReleaseReturnsFreeSegmentsNowAndTheRestAtTheirLastBlock) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 5);
  void* kept = alloc.allocate(12 * MiB, 5);  // a segment of its own
  void* tmp = alloc.allocate(1000, 5);       // a small segment
  alloc.deallocate(tmp);
  alloc.end_pool(pool, 5);
  EXPECT_EQ(alloc.stats().reserved, 14 * MiB);
  alloc.release_pool(pool);
  EXPECT_EQ(backend.frees, 1) << "the free small segment goes back at once";
  EXPECT_EQ(alloc.stats().reserved, 12 * MiB);
  EXPECT_EQ(alloc.stats().allocated, 12 * MiB);
  alloc.deallocate(kept);
  EXPECT_EQ(backend.frees, 2) << "the last block of the released pool's segment";
  EXPECT_EQ(alloc.stats().reserved, 0u);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 0u);
  EXPECT_TRUE(backend.segments.empty());
  EXPECT_THROW(alloc.begin_pool(pool, 5), Error) << "a released pool takes no new requests";
}

// empty_cache returns the general pool's free segments only: a live pool's free segments are the
// memory its graph replays into.
TEST(PrivatePool, EmptyCacheLeavesLivePoolsAlone) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  void* g = alloc.allocate(3 * MiB, 1);
  alloc.deallocate(g);
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 1);
  void* p = alloc.allocate(3 * MiB, 1);
  alloc.deallocate(p);
  alloc.end_pool(pool, 1);
  EXPECT_EQ(alloc.stats().reserved, 40 * MiB);
  alloc.empty_cache();
  EXPECT_EQ(backend.frees, 1);
  EXPECT_EQ(alloc.stats().reserved, 20 * MiB);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 20 * MiB);
  alloc.release_pool(pool);
  EXPECT_EQ(alloc.stats().reserved, 0u);
}

// While a pool is being filled nothing goes back to the system (on CUDA, cudaFree would
// synchronise the device during a capture): empty_cache waits, a pool released meanwhile goes
// back at the end of the capture, and a request that does not fit fails with an error saying why
// instead of releasing cached blocks.
TEST(PrivatePool, NothingGoesBackDuringACapture) {
  Backend backend;
  backend.budget = 60 * MiB;
  CachingAllocator alloc = backend.make();
  void* g = alloc.allocate(30 * MiB, 1);
  alloc.deallocate(g);  // 30 MiB cached in the general pool
  const PoolId old_pool = alloc.create_pool();
  alloc.begin_pool(old_pool, 2);
  alloc.deallocate(alloc.allocate(1000, 2));
  alloc.end_pool(old_pool, 2);
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 1);
  alloc.empty_cache();
  alloc.release_pool(old_pool);
  EXPECT_EQ(backend.frees, 0);
  try {
    alloc.allocate(40 * MiB, 1);
    ADD_FAILURE() << "allocated past the budget";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("during a CUDA graph capture"), std::string::npos) << what;
  }
  EXPECT_EQ(backend.frees, 0) << "the general cache survived";
  void* fits = alloc.allocate(20 * MiB, 1);  // a new segment for the pool still fits
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 20 * MiB);
  alloc.deallocate(fits);
  alloc.end_pool(pool, 1);
  EXPECT_EQ(backend.frees, 1) << "the pool released during the capture goes back now";
  EXPECT_EQ(alloc.pool_stats(old_pool).reserved, 0u);
  alloc.release_pool(pool);
}

// Out of memory outside a capture, cached general blocks go back, a live pool's free segments
// never (they are a graph's memory).
TEST(PrivatePool, OutOfMemoryKeepsLivePools) {
  Backend backend;
  backend.budget = 60 * MiB;
  CachingAllocator alloc = backend.make();
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 1);
  alloc.deallocate(alloc.allocate(30 * MiB, 1));
  alloc.end_pool(pool, 1);
  void* g = alloc.allocate(20 * MiB, 1);
  alloc.deallocate(g);
  void* big = alloc.allocate(30 * MiB, 1);  // 80 > 60: the general 20 MiB goes back, not the pool
  EXPECT_EQ(backend.frees, 1);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 30 * MiB);
  EXPECT_THROW(alloc.allocate(10 * MiB, 1), Error);
  EXPECT_EQ(alloc.pool_stats(pool).reserved, 30 * MiB);
  alloc.deallocate(big);
  alloc.release_pool(pool);
}

TEST(PrivatePool, StatsCountEveryPool) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  void* g = alloc.allocate(512, 0);
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 0);
  void* p = alloc.allocate(3 * MiB, 0);
  alloc.end_pool(pool, 0);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 512u + 3 * MiB);
  EXPECT_EQ(s.reserved, 22 * MiB);
  EXPECT_EQ(s.peak_allocated, 512u + 3 * MiB);
  EXPECT_EQ(s.raw_allocs, 2u);
  const auto general = alloc.pool_stats(CachingAllocator::kGeneralPool);
  EXPECT_EQ(general.allocated, 512u);
  EXPECT_EQ(general.reserved, 2 * MiB);
  EXPECT_EQ(alloc.pool_stats(pool).allocated, 3 * MiB);
  alloc.deallocate(p);
  alloc.release_pool(pool);
  EXPECT_EQ(alloc.stats().raw_frees, 1u);
  EXPECT_EQ(alloc.stats().reserved, 2 * MiB);
  alloc.deallocate(g);
}

TEST(PrivatePool, RefusesMisuse) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  EXPECT_THROW(alloc.begin_pool(42, 1), Error) << "never created";
  const PoolId pool = alloc.create_pool();
  const PoolId other = alloc.create_pool();
  EXPECT_NE(pool, other);
  EXPECT_NE(pool, CachingAllocator::kGeneralPool);
  alloc.begin_pool(pool, 1);
  EXPECT_THROW(alloc.begin_pool(other, 1), Error) << "one pool per stream at a time";
  EXPECT_THROW(alloc.end_pool(other, 1), Error) << "not the stream's pool";
  EXPECT_THROW(alloc.end_pool(pool, 2), Error) << "not routed";
  alloc.end_pool(pool, 1);
  alloc.release_pool(pool);
  EXPECT_THROW(alloc.release_pool(pool), Error) << "released twice";
  alloc.release_pool(other);
}

// Releasing a pool a stream still routes to (its owner went away mid-capture) ends the routing.
TEST(PrivatePool, ReleaseEndsRoutesStillInPlace) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 1);
  void* a = alloc.allocate(1000, 1);
  alloc.release_pool(pool);
  void* b = alloc.allocate(1000, 1);  // the general pool now
  EXPECT_NE(backend.segment_of(b), backend.segment_of(a));
  alloc.deallocate(a);
  EXPECT_EQ(backend.frees, 1) << "no capture under way any more: the pool's segment went back";
  alloc.deallocate(b);
}

// A destroyed stream's blocks (keyed by a stream id that is never reused) are never handed to
// another stream, and go back to the system only once the work queued on the stream before it
// went is done: a block still in use then goes back when it is freed.
TEST(RetiredStream, BlocksGoBackOnlyAfterTheStreamsWorkAndNeverMoveAcross) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  void* cached = alloc.allocate(3 * MiB, 7);
  void* in_use = alloc.allocate(30 * MiB, 7);  // a segment of its own
  alloc.deallocate(cached);
  bool work_done = false;
  alloc.retire_stream(7, [&] { return work_done; });
  EXPECT_EQ(alloc.retired_streams(), 1u);
  EXPECT_EQ(backend.frees, 0);

  // Another stream (another id: the driver may have given it the dead stream's handle) gets a
  // fresh segment, never the dead stream's cached block.
  void* other = alloc.allocate(3 * MiB, 8);
  EXPECT_NE(backend.segment_of(other), backend.segment_of(cached));
  EXPECT_EQ(backend.allocs, 3);
  EXPECT_EQ(backend.frees, 0);  // the work is not done: nothing of stream 7 goes back

  // The work is done: the next time memory is needed, the wholly free segment goes back.
  work_done = true;
  void* more = alloc.allocate(25 * MiB, 8);
  EXPECT_EQ(backend.frees, 1);
  EXPECT_EQ(alloc.stats().reserved, 20 * MiB + 30 * MiB + 26 * MiB);  // 8's two and `in_use`'s
  EXPECT_EQ(alloc.retired_streams(), 1u);  // `in_use` is still out
  // The block still in use goes back when freed, and the stream is forgotten.
  alloc.deallocate(in_use);
  EXPECT_EQ(backend.frees, 2);
  EXPECT_EQ(alloc.retired_streams(), 0u);
  alloc.deallocate(other);
  alloc.deallocate(more);
  const AllocatorStats stats = alloc.stats();
  EXPECT_EQ(stats.allocated, 0u);
  EXPECT_EQ(stats.reserved, backend.live);
}

// Retiring during a capture on that stream is refused; nothing goes back while a pool fills.
TEST(RetiredStream, WaitsForCapturesToEnd) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  alloc.deallocate(alloc.allocate(3 * MiB, 5));
  const PoolId pool = alloc.create_pool();
  alloc.begin_pool(pool, 6);
  EXPECT_THROW(alloc.retire_stream(6, [] { return true; }), Error);
  alloc.retire_stream(5, [] { return true; });
  EXPECT_EQ(backend.frees, 0);  // a capture is under way: no cudaFree
  alloc.end_pool(pool, 6);
  alloc.empty_cache();
  EXPECT_EQ(backend.frees, 1);
  EXPECT_EQ(alloc.retired_streams(), 0u);
  alloc.release_pool(pool);
}

// A limit on what is reserved behaves as a system out of memory: the cache goes back and the
// request is retried, and past that the request fails naming the sizes; lifting it lifts that.
TEST(AllocatorLimit, ReleasesTheCacheThenFailsAsOutOfMemory) {
  Backend backend;
  CachingAllocator alloc = backend.make();
  alloc.set_limit(45 * MiB);
  alloc.deallocate(alloc.allocate(3 * MiB, 1));  // a cached 20 MiB segment of stream 1
  void* a = alloc.allocate(3 * MiB, 2);           // stream 2: a second segment, 40 MiB reserved
  void* b = alloc.allocate(18 * MiB, 2);          // 40 + 18 > 45: stream 1's segment goes back
  EXPECT_EQ(backend.frees, 1);
  EXPECT_EQ(alloc.stats().reserved, 38 * MiB);
  const std::string e = kestrel::testing::error_of([&] { alloc.allocate(20 * MiB, 2); });
  EXPECT_NE(e.find("out of memory allocating"), std::string::npos) << e;
  EXPECT_EQ(backend.allocs, 3);
  alloc.set_limit(0);
  alloc.deallocate(alloc.allocate(20 * MiB, 2));
  alloc.deallocate(a);
  alloc.deallocate(b);
}
