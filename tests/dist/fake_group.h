// An in-process ProcessGroup for unit tests: N "ranks" are N threads of one process that meet in
// a shared FakeWorld. Every collective is a rendezvous of all ranks (so it checks that they issue
// the same collectives in the same order: a mismatch in kind or size fails loudly), computed in
// the tensors' own dtype, with the same summation order on every rank (results bitwise equal, as
// a real ring all-reduce gives). Collectives complete before they return; a rank that does not
// arrive within the timeout makes the others throw instead of hanging the test. CUDA tensors are
// staged through host copies (synchronously: the fake checks semantics, not asynchrony).
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "dist/process_group.h"

namespace kestrel::dist::testing {

class FakeWorld {
 public:
  explicit FakeWorld(int size, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : size_(size), timeout_(timeout), slots_(size) {}
  int size() const { return size_; }
  // Wakes every waiting rank with an error (a rank failed and will not arrive).
  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    cv_.notify_all();
  }

  // Publishes this rank's (kind, tensors), waits for every rank, then runs `body` with every
  // rank's published tensors, then waits again so nobody's buffers change while others read.
  void collective(int rank, const std::string& kind, std::vector<Tensor> tensors,
                  const std::function<void(const std::vector<std::vector<Tensor>>&)>& body) {
    slots_[rank] = {kind, std::move(tensors)};
    arrive(rank);
    for (int r = 0; r < size_; ++r)
      KESTREL_CHECK(slots_[r].kind == kind, "fake group: rank ", rank, " issued ", kind,
                    " while rank ", r, " issued ", slots_[r].kind,
                    ": ranks must issue the same collectives in the same order");
    std::vector<std::vector<Tensor>> all;
    for (const Slot& s : slots_) all.push_back(s.tensors);
    body(all);
    arrive(rank);
  }

 private:
  struct Slot {
    std::string kind;
    std::vector<Tensor> tensors;
  };

  void arrive(int rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool ok =
        cv_.wait_for(lock, timeout_, [&] { return generation_ != generation || aborted_; });
    KESTREL_CHECK(!aborted_, "fake group: rank ", rank, " stopped: another rank failed");
    KESTREL_CHECK(ok, "fake group: rank ", rank, " waited ", timeout_.count(),
                  " ms for the other ranks at a collective (a rank skipped a collective)");
  }

  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

class FakeWork : public Work {
 public:
  void wait() override {}
  void synchronize() override {}
  bool is_completed() override { return true; }
};

class FakeGroup : public ProcessGroup {
 public:
  FakeGroup(std::shared_ptr<FakeWorld> world, int rank)
      : ProcessGroup(rank, world->size()), world_(std::move(world)) {}
  std::string backend() const override { return "fake"; }

  // Counts of collectives issued, for tests that check what a component communicates.
  int all_reduces = 0, broadcasts = 0, all_gathers = 0;

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    ++all_reduces;
    check_contiguous(t, "all_reduce");
    const std::string kind =
        "all_reduce " + std::to_string(t.numel()) + " " + dtype_name(t.dtype());
    Tensor result;
    world_->collective(
        rank(), kind, {on_host(t)}, [&](const std::vector<std::vector<Tensor>>& all) {
          if (t.dtype() == DType::F32)
            result = reduce<float>(t, all, op);
          else if (t.dtype() == DType::F64)
            result = reduce<double>(t, all, op);
          else if (t.dtype() == DType::I64)
            result = reduce<int64_t>(t, all, op);
          else if (t.dtype() == DType::F16)
            result = reduce<f16>(t, all, op);
          else if (t.dtype() == DType::BF16)
            result = reduce<bf16>(t, all, op);
          else
            KESTREL_CHECK(false, "fake group: all_reduce of ", t.describe(), " is not supported");
        });
    t.copy_(result);  // after the second rendezvous: every rank has read every input
    return std::make_shared<FakeWork>();
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    ++broadcasts;
    check_contiguous(t, "broadcast");
    const std::string kind =
        "broadcast " + std::to_string(t.numel()) + " from " + std::to_string(root);
    world_->collective(rank(), kind, {on_host(t)},
                       [&](const std::vector<std::vector<Tensor>>& all) {
                         if (rank() != root) t.copy_(all[root][0]);
                       });
    return std::make_shared<FakeWork>();
  }

  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) override {
    ++all_gathers;
    check_contiguous(in, "all_gather");
    check_contiguous(out, "all_gather");
    KESTREL_CHECK(out.numel() == in.numel() * size(), "fake group: all_gather output ",
                  out.describe(), " must hold ", size(), " x ", in.numel(), " elements");
    const std::string kind = "all_gather " + std::to_string(in.numel());
    world_->collective(rank(), kind, {on_host(in)},
                       [&](const std::vector<std::vector<Tensor>>& all) {
                         const Tensor flat = out.reshape({out.numel()});
                         for (int r = 0; r < size(); ++r)
                           flat.slice(0, r * in.numel(), (r + 1) * in.numel())
                               .copy_(all[r][0].reshape({in.numel()}));
                       });
    return std::make_shared<FakeWork>();
  }

  std::shared_ptr<Work> barrier() override {
    world_->collective(rank(), "barrier", {}, [](const std::vector<std::vector<Tensor>>&) {});
    return std::make_shared<FakeWork>();
  }

 private:
  static void check_contiguous(const Tensor& t, const char* op) {
    KESTREL_CHECK(t.is_contiguous(), "fake group: ", op, " needs a contiguous tensor, got ",
                  t.describe());
  }
  static Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

  // Every rank sums in rank order into a private buffer, so all ranks end with the same bits.
  // Half types add in float and round each partial sum to their type, as NCCL and Gloo do.
  template <class T>
  static Tensor reduce(const Tensor& t, const std::vector<std::vector<Tensor>>& all, ReduceOp op) {
    std::vector<T> acc(t.numel(), from_acc<T>(0));
    for (const auto& r : all) {
      const T* p = r[0].data<T>();
      for (int64_t i = 0; i < t.numel(); ++i)
        acc[i] = from_acc<T>(static_cast<acc_t<T>>(to_acc<T>(acc[i]) + to_acc<T>(p[i])));
    }
    if (op == ReduceOp::Average)
      for (T& v : acc) v = from_acc<T>(to_acc<T>(v) / static_cast<acc_t<T>>(all.size()));
    return Tensor::from_vector(acc, t.shape());
  }

  std::shared_ptr<FakeWorld> world_;
};

// Runs fn(group) on `size` threads, one FakeGroup per thread; rethrows the first error raised.
inline void run_ranks(int size, const std::function<void(std::shared_ptr<FakeGroup> group)>& fn) {
  auto world = std::make_shared<FakeWorld>(size);
  std::exception_ptr first_error;  // the failing rank's, not the "another rank failed" that follow
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(std::make_shared<FakeGroup>(world, r));
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
        }
        world->abort();
      }
    });
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace kestrel::dist::testing
