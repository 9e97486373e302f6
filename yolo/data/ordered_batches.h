// An epoch's batches built ahead on worker threads and handed out in order, shared by the
// detection loader (loader.h) and the classifier's (classify_loader.h), which say only how a
// batch is built. Workers claim the next batch index while fewer than workers + prefetch are
// claimed and not yet handed out; next() waits for the batch it owes, so batches come out in
// index order whatever order they finish in. start_epoch() abandons what is left of the previous
// epoch (ready batches dropped, batches being built finished or cancelled, their results
// dropped) and may start inside the epoch. A batch's failure is thrown by next() as
// kestrel::Error (other exceptions become one, prefixed with `what` and the batch), and ends the
// epoch. Without workers, next() builds on the calling thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"

namespace kestrel::yolo::data {

// Batch: what a build makes; Buffers: one thread's reusable memory (a worker's own, or the
// consumer's without workers); Context: what an epoch's builds read (its order), shared by them.
template <class Batch, class Buffers, class Context>
class OrderedBatches {
 public:
  // Batch b of `epoch`; nullopt when `cancelled` turned true on the way (its epoch was abandoned).
  using Build = std::function<std::optional<Batch>(int64_t epoch, int64_t b, const Context& context,
                                                   const std::function<bool()>& cancelled, Buffers* buffers)>;

  // `thread_start` (optional) runs first on each worker thread (a loader's CUDA device).
  OrderedBatches(int workers, int prefetch, std::string what, Build build, std::function<void()> thread_start = {})
      : window_(static_cast<int64_t>(workers) + prefetch), what_(std::move(what)), build_(std::move(build)) {
    for (int w = 0; w < workers; ++w)
      threads_.emplace_back([this, thread_start] {
        if (thread_start) thread_start();
        work();
      });
  }
  ~OrderedBatches() {  // stops and joins the workers, also in the middle of an epoch
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      ++generation_;
    }
    work_ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  OrderedBatches(const OrderedBatches&) = delete;
  OrderedBatches& operator=(const OrderedBatches&) = delete;

  // Begins `epoch` of `batches` batches at `first_batch`, its builds reading `context`.
  void start_epoch(int64_t epoch, int64_t batches, int64_t first_batch, std::shared_ptr<const Context> context) {
    KESTREL_CHECK(epoch >= 0, what_, ": epoch must be >= 0, got ", epoch);
    KESTREL_CHECK(first_batch >= 0 && first_batch <= batches, what_, ": first batch ", first_batch, " outside [0, ",
                  batches, "]");
    std::unique_lock lock(mutex_);
    ++generation_;
    claimed_ = batches_;  // no new claim on the abandoned epoch while its builds in flight end
    batch_ready_.wait(lock, [&] { return in_flight_ == 0; });
    ready_.clear();  // after the wait: nothing of the old epoch can arrive any more
    context_ = std::move(context);
    epoch_ = epoch;
    batches_ = batches;
    claimed_ = delivered_ = first_batch;
    failed_ = false;
    lock.unlock();
    work_ready_.notify_all();
  }

  // The next batch in order, or nullopt when the epoch is done.
  std::optional<Batch> next() {
    std::unique_lock lock(mutex_);
    KESTREL_CHECK(epoch_ >= 0, what_, ": call start_epoch(epoch) before next()");
    if (failed_ || delivered_ >= batches_) return std::nullopt;
    const int64_t b = delivered_;
    if (threads_.empty()) {  // no workers: build it here
      const std::shared_ptr<const Context> context = context_;
      const int64_t epoch = epoch_;
      ++delivered_;
      lock.unlock();
      try {
        return build_(epoch, b, *context, [] { return false; }, &consumer_buffers_);
      } catch (...) {
        lock.lock();
        failed_ = true;
        throw;
      }
    }
    batch_ready_.wait(lock, [&] { return ready_.count(b) > 0; });
    Slot slot = std::move(ready_.at(b));
    ready_.erase(b);
    ++delivered_;
    if (slot.error) failed_ = true;
    lock.unlock();
    work_ready_.notify_all();
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void work() {
    const int64_t window = window_;
    Buffers buffers;  // this thread's memory, reused by every batch it builds
    std::unique_lock lock(mutex_);
    for (;;) {
      work_ready_.wait(lock, [&] { return stop_ || (!failed_ && claimed_ < batches_ && claimed_ - delivered_ < window); });
      if (stop_) return;
      const int64_t b = claimed_++, epoch = epoch_;
      const uint64_t generation = generation_;
      const std::shared_ptr<const Context> context = context_;
      ++in_flight_;
      lock.unlock();
      Slot slot;
      try {
        slot.batch = build_(epoch, b, *context, [&] { return generation_ != generation; }, &buffers);
      } catch (const Error&) {
        slot.error = std::current_exception();
      } catch (const std::exception& e) {
        slot.error = std::make_exception_ptr(Error(str(what_, ": batch ", b, ": ", e.what())));
      }
      lock.lock();
      --in_flight_;
      if (generation == generation_ && (slot.batch || slot.error)) ready_[b] = std::move(slot);
      batch_ready_.notify_all();
    }
  }

  const int64_t window_;  // batches claimed and not yet handed out, at most
  const std::string what_;
  const Build build_;
  std::mutex mutex_;
  std::condition_variable work_ready_;   // workers: a batch may be claimed, or stop
  std::condition_variable batch_ready_;  // consumer: a slot was filled; start_epoch: idle
  std::shared_ptr<const Context> context_;
  int64_t epoch_ = -1;
  int64_t claimed_ = 0, delivered_ = 0, batches_ = 0;
  int in_flight_ = 0;
  bool failed_ = false, stop_ = false;
  std::atomic<uint64_t> generation_{0};  // bumped to abandon batches being built
  std::map<int64_t, Slot> ready_;
  Buffers consumer_buffers_;  // without workers, next() builds with these
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace kestrel::yolo::data
