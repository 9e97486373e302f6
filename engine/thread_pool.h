// A fixed set of worker threads taking tasks from one FIFO queue (the data loader's decode and
// augmentation work). Workers sleep on a condition variable when there is nothing to do. The
// destructor runs every task already queued, then joins the workers.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }

  // Runs f() on a worker; the future carries its result or the exception it threw.
  template <class F>
  auto submit(F&& f) -> std::future<std::invoke_result_t<std::decay_t<F>>> {
    using R = std::invoke_result_t<std::decay_t<F>>;
    // packaged_task is move-only and std::function needs a copyable target: share it.
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }

  // Calls fn(i) once for every i in [begin, end), spread over the workers and the calling thread,
  // and returns when all calls have finished. If calls throw, the remaining unstarted indices are
  // skipped and the first exception is rethrown here. The caller takes work too, so this also
  // finishes when called from inside a task while every worker is busy.
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t)>& fn);

 private:
  void enqueue(std::function<void()> job);
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kestrel
