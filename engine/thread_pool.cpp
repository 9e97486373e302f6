#include "engine/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>

#include "base/error.h"

namespace kestrel {

ThreadPool::ThreadPool(size_t threads) {
  KESTREL_CHECK(threads > 0, "ThreadPool: needs at least one thread, got 0");
  workers_.reserve(threads);
  try {
    for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  } catch (...) {
    // Could not start them all (thread limit): stop the ones that did start before reporting.
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& w : workers_) w.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void ThreadPool::work() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();  // never throws: submit's packaged_task and parallel_for's chunks catch
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  // A few chunks per thread even out uneven work; chunk c is a contiguous range of indices.
  const int64_t chunks = std::min<int64_t>(n, static_cast<int64_t>(size() + 1) * 4);
  const int64_t base = n / chunks, extra = n % chunks;

  struct State {
    std::atomic<int64_t> next{0};  // next chunk to claim
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::condition_variable all_done;
    int64_t finished = 0;  // chunks run or skipped
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  // Helpers that start after every chunk was claimed touch only `state` (shared), never `fn`.
  const std::function<void(int64_t)>* body = &fn;
  auto run_chunks = [state, body, begin, base, extra, chunks] {
    while (true) {
      const int64_t c = state->next.fetch_add(1);
      if (c >= chunks) return;
      if (!state->failed.load()) {
        try {
          const int64_t lo = begin + c * base + std::min(c, extra);
          const int64_t hi = lo + base + (c < extra ? 1 : 0);
          for (int64_t i = lo; i < hi && !state->failed.load(std::memory_order_relaxed); ++i)
            (*body)(i);
        } catch (...) {
          std::lock_guard lock(state->mutex);
          if (!state->error) state->error = std::current_exception();
          state->failed = true;
        }
      }
      std::lock_guard lock(state->mutex);
      if (++state->finished == chunks) state->all_done.notify_all();
    }
  };

  const int64_t helpers = std::min<int64_t>(static_cast<int64_t>(size()), chunks - 1);
  for (int64_t h = 0; h < helpers; ++h) enqueue(run_chunks);
  run_chunks();
  std::unique_lock lock(state->mutex);
  state->all_done.wait(lock, [&] { return state->finished == chunks; });
  if (state->error) std::rethrow_exception(state->error);
}

}  // namespace kestrel
