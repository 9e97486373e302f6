#include "engine/caching_allocator.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "kernels/error.h"

namespace kestrel {

bool CachingAllocator::ByStreamSize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(RawAlloc raw_alloc, RawFree raw_free)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  release_free_segments(nullptr);
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
  Block* block = find_cached(size, stream_key, small);
  if (!block) block = new_segment(size, stream_key, small);
  block = split(block, size);
  block->allocated = true;
  allocated_[block->ptr] = block;
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::find_cached(size_t size, uintptr_t stream, bool small) {
  Pool& p = pool(small);
  Block key{nullptr, size, stream, small};
  const auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  p.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, uintptr_t stream, bool small) {
  size_t bytes = segment_size(size);
  void* ptr = raw_alloc_(bytes);
  if (!ptr && release_free_segments(&stream) > 0) ptr = raw_alloc_(bytes);
  if (!ptr && release_free_segments(nullptr) > 0) ptr = raw_alloc_(bytes);
  if (!ptr && bytes > size && !small) {  // the shared 20 MiB segment no longer fits: only the block
    bytes = size;
    ptr = raw_alloc_(bytes);
  }
  KESTREL_CHECK(ptr, "out of memory allocating ", size, " bytes (", stats_.allocated,
                " bytes in use, ", stats_.reserved,
                " reserved, cached blocks released); reduce --batch-size or --img-size");
  ++stats_.raw_allocs;
  stats_.reserved += bytes;
  return new Block{static_cast<char*>(ptr), bytes, stream, small};
}

CachingAllocator::Block* CachingAllocator::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  const bool worth_it = block->small ? rest >= kMinBlock : rest > kSmallSize;
  if (!worth_it) return block;
  Block* remainder = new Block{block->ptr + size, rest, block->stream, block->small};
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
  p.insert(block);
}

size_t CachingAllocator::release_free_segments(const uintptr_t* stream) {
  size_t freed = 0;
  for (Pool* p : {&small_pool_, &large_pool_}) {
    std::vector<Block*> whole;
    for (Block* b : *p)
      if (!b->prev && !b->next && (!stream || b->stream == *stream)) whole.push_back(b);
    for (Block* b : whole) {
      p->erase(b);
      raw_free_(b->ptr);
      stats_.reserved -= b->size;
      ++stats_.raw_frees;
      freed += b->size;
      delete b;
    }
  }
  return freed;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_free_segments(nullptr);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
}

}  // namespace kestrel
