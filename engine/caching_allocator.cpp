#include "engine/caching_allocator.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "base/error.h"

namespace kestrel {

bool CachingAllocator::ByStreamSize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->pool, a->stream, a->size, a->ptr) < std::tie(b->pool, b->stream, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(RawAlloc raw_alloc, RawFree raw_free)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  release_where([](const Block*) { return true; });  // every pool's cache: nothing runs any more
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlone) return kLargeSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* CachingAllocator::allocate(size_t bytes, uintptr_t stream_key) {
  const size_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  std::lock_guard lock(mutex_);
  const auto route = routes_.find(stream_key);
  const PoolId pool = route == routes_.end() ? kGeneralPool : route->second;
  Block* block = find_cached(size, stream_key, small, pool);
  if (!block) block = new_segment(size, stream_key, small, pool);
  block = split(block, size);
  block->allocated = true;
  allocated_[block->ptr] = block;
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  if (pool != kGeneralPool) private_pools_.at(pool).stats.allocated += block->size;
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::find_cached(size_t size, uintptr_t stream, bool small,
                                                       PoolId pool_id) {
  Pool& p = pool(small);
  Block key{nullptr, size, stream, small, pool_id};
  const auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->pool != pool_id || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  p.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, uintptr_t stream, bool small,
                                                       PoolId pool_id) {
  size_t bytes = segment_size(size);
  if (!retired_.empty()) settle_retired();  // dead streams' memory first
  void* ptr = raw_alloc(bytes);
  // Out of memory: the general pool's free segments of this stream go back, then everyone's (and
  // those of released private pools); a live private pool's never, and nothing while a pool is
  // being filled.
  const auto general_of_stream = [&](const Block* b) {
    return b->pool == kGeneralPool && b->stream == stream;
  };
  const auto general = [this](const Block* b) {
    return b->pool == kGeneralPool || released_pool(b);
  };
  const bool may_release = filling_ == 0;
  if (!ptr && may_release && release_where(general_of_stream) > 0) ptr = raw_alloc(bytes);
  if (!ptr && may_release && release_where(general) > 0) ptr = raw_alloc(bytes);
  if (!ptr && bytes > size && !small) {  // the shared 20 MiB segment no longer fits: only the block
    bytes = size;
    ptr = raw_alloc(bytes);
  }
  if (!ptr && filling_ > 0)
    KESTREL_FAIL("out of memory allocating ", size, " bytes during a CUDA graph capture (",
                 stats_.allocated, " bytes in use, ", stats_.reserved,
                 " reserved; cached blocks cannot go back to the system while a capture is under "
                 "way, since that would synchronise the device); free memory before "
                 "capture_begin (empty the cache) or reduce --batch-size or --img-size");
  KESTREL_CHECK(ptr, "out of memory allocating ", size, " bytes (", stats_.allocated,
                " bytes in use, ", stats_.reserved,
                " reserved, cached blocks released); reduce --batch-size or --img-size");
  ++stats_.raw_allocs;
  stats_.reserved += bytes;
  if (pool_id != kGeneralPool) {
    PrivatePool& pp = private_pools_.at(pool_id);
    ++pp.segments;
    pp.stats.reserved += bytes;
  }
  return new Block{static_cast<char*>(ptr), bytes, stream, small, pool_id};
}

CachingAllocator::Block* CachingAllocator::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  const bool worth_it = block->small ? rest >= kMinBlock : rest > kSmallSize;
  if (!worth_it) return block;
  Block* remainder = new Block{block->ptr + size, rest, block->stream, block->small, block->pool};
  remainder->prev = block;
  remainder->next = block->next;
  if (block->next) block->next->prev = remainder;
  block->next = remainder;
  block->size = size;
  pool(block->small).insert(remainder);
  return block;
}

void CachingAllocator::deallocate(void* ptr) {
  std::lock_guard lock(mutex_);
  const auto it = allocated_.find(ptr);
  KESTREL_CHECK(it != allocated_.end(), "deallocate of a pointer this allocator did not hand out");
  Block* block = it->second;
  allocated_.erase(it);
  stats_.allocated -= block->size;
  if (block->pool != kGeneralPool) private_pools_.at(block->pool).stats.allocated -= block->size;
  block->allocated = false;
  Pool& p = pool(block->small);
  // Merge with free neighbours (out of the pool first: the pool is ordered by size).
  if (Block* prev = block->prev; prev && !prev->allocated) {
    p.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next && !next->allocated) {
    p.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }
  // The last block of a released pool's segment: the segment goes back (unless a capture is
  // under way; then at the last end_pool).
  const bool whole = !block->prev && !block->next;
  if (whole && block->pool != kGeneralPool && private_pools_.at(block->pool).released &&
      filling_ == 0)
    return free_segment(block);
  p.insert(block);
  if (!retired_.empty() && retired_.contains(block->stream)) settle_retired();
}

void CachingAllocator::retire_stream(uintptr_t stream_key, std::function<bool()> work_done) {
  std::lock_guard lock(mutex_);
  KESTREL_CHECK(!routes_.contains(stream_key), "retire_stream: the stream still allocates from "
                "private pool ", routes_.at(stream_key), "; end its capture first");
  retired_[stream_key] = Retired{std::move(work_done)};
  settle_retired();
}

size_t CachingAllocator::retired_streams() const {
  std::lock_guard lock(mutex_);
  return retired_.size();
}

void CachingAllocator::settle_retired() {
  if (filling_ > 0) return;  // a cudaFree would synchronise the device during a capture
  for (auto it = retired_.begin(); it != retired_.end();) {
    Retired& r = it->second;
    if (!r.done && !(r.done = r.work_done())) {
      ++it;
      continue;
    }
    const uintptr_t key = it->first;
    const auto general_of_key = [key](const Block* b) { return b->pool == kGeneralPool && b->stream == key; };
    release_where(general_of_key);
    const bool left = std::any_of(small_pool_.begin(), small_pool_.end(), general_of_key) ||
                      std::any_of(large_pool_.begin(), large_pool_.end(), general_of_key) ||
                      std::any_of(allocated_.begin(), allocated_.end(),
                                  [&](const auto& a) { return general_of_key(a.second); });
    it = left ? std::next(it) : retired_.erase(it);
  }
}

void CachingAllocator::free_segment(Block* segment) {
  raw_free_(segment->ptr);
  stats_.reserved -= segment->size;
  ++stats_.raw_frees;
  if (segment->pool != kGeneralPool) {
    const auto it = private_pools_.find(segment->pool);
    PrivatePool& pp = it->second;
    --pp.segments;
    pp.stats.reserved -= segment->size;
    if (pp.released && pp.segments == 0) private_pools_.erase(it);
  }
  delete segment;
}

size_t CachingAllocator::release_where(const std::function<bool(const Block*)>& pick) {
  size_t freed = 0;
  for (Pool* p : {&small_pool_, &large_pool_}) {
    std::vector<Block*> whole;
    for (Block* b : *p)
      if (!b->prev && !b->next && pick(b)) whole.push_back(b);
    for (Block* b : whole) {
      p->erase(b);
      freed += b->size;
      free_segment(b);
    }
  }
  return freed;
}

bool CachingAllocator::released_pool(const Block* b) const {
  return b->pool != kGeneralPool && private_pools_.at(b->pool).released;
}

void* CachingAllocator::raw_alloc(size_t bytes) {
  if (limit_ > 0 && stats_.reserved + bytes > limit_) return nullptr;
  return raw_alloc_(bytes);
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  if (filling_ > 0) return;  // nothing goes back during a capture (see the header)
  settle_retired();
  release_where([this](const Block* b) { return b->pool == kGeneralPool || released_pool(b); });
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
}

// --- private pools ------------------------------------------------------------------------------

CachingAllocator::PoolId CachingAllocator::create_pool() {
  std::lock_guard lock(mutex_);
  const PoolId id = next_pool_++;
  private_pools_.emplace(id, PrivatePool{});
  return id;
}

CachingAllocator::PrivatePool& CachingAllocator::live_pool(PoolId id, const char* op) {
  const auto it = private_pools_.find(id);
  KESTREL_CHECK(it != private_pools_.end() && !it->second.released, op, ": pool ", id,
                " is not a live private pool of this allocator; make one with create_pool()");
  return it->second;
}

void CachingAllocator::begin_pool(PoolId id, uintptr_t stream_key) {
  std::lock_guard lock(mutex_);
  PrivatePool& pp = live_pool(id, "begin_pool");
  const auto [route, added] = routes_.emplace(stream_key, id);
  KESTREL_CHECK(added, "begin_pool: the stream already allocates from private pool ",
                route->second, "; end that (capture_end) before starting another on it");
  ++pp.routes;
  ++filling_;
}

void CachingAllocator::end_pool(PoolId id, uintptr_t stream_key) {
  std::lock_guard lock(mutex_);
  const auto route = routes_.find(stream_key);
  KESTREL_CHECK(route != routes_.end() && route->second == id, "end_pool: the stream does not "
                "allocate from private pool ", id, "; pair every end_pool with its begin_pool");
  routes_.erase(route);
  --private_pools_.at(id).routes;
  if (--filling_ == 0) release_where([this](const Block* b) { return released_pool(b); });
}

void CachingAllocator::release_pool(PoolId id) {
  std::lock_guard lock(mutex_);
  PrivatePool& pp = live_pool(id, "release_pool");
  std::erase_if(routes_, [id](const auto& route) { return route.second == id; });
  filling_ -= pp.routes;
  pp.routes = 0;
  pp.released = true;
  if (pp.segments == 0) {
    private_pools_.erase(id);
    return;
  }
  if (filling_ == 0) release_where([this](const Block* b) { return released_pool(b); });
}

CachingAllocator::PoolStats CachingAllocator::pool_stats(PoolId id) const {
  std::lock_guard lock(mutex_);
  if (id == kGeneralPool) {
    PoolStats general{stats_.allocated, stats_.reserved};
    for (const auto& [pid, pp] : private_pools_) {
      general.allocated -= pp.stats.allocated;
      general.reserved -= pp.stats.reserved;
    }
    return general;
  }
  const auto it = private_pools_.find(id);
  return it == private_pools_.end() ? PoolStats{} : it->second.stats;
}

}  // namespace kestrel
