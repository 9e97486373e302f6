#include "dist/nccl_group.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <iterator>
#include <mutex>

#include "base/error.h"
#include "engine/cuda_graph.h"
#include "engine/host_sync.h"
#include "kernels/cuda_check.h"

namespace kestrel::dist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class NcclWork;

struct NcclProcessGroup::State {
  int rank = 0;
  Device device;
  milliseconds timeout{0};
  // Three locks, always taken in this order when nested (issue_mutex, mutex, comm_mutex):
  // - issue_mutex: held by the thread issuing an operation (set-up, a collective, finalize) from
  //   the call until it has settled, so that no second operation starts meanwhile, as NCCL asks;
  // - mutex: the fields below; held only briefly;
  // - comm_mutex: held for each single call on the communicator, so that only one thread
  //   operates it at a time (NCCL's thread-safety rule), ncclCommAbort included. An operation that
  //   settles (ncclInProgress) takes it once per look only: the watchdog keeps reading
  //   asynchronous errors, timing the other work and aborting meanwhile, where one lock held for
  //   the whole settle would have stopped it for up to the timeout.
  std::mutex issue_mutex;
  std::mutex mutex;
  std::mutex comm_mutex;
  std::condition_variable stop_cv;
  bool stopping = false;
  ncclComm_t comm = nullptr;  // written under mutex and comm_mutex both
  // Set (under mutex) before the communicator is aborted; from then on nothing calls it. Read
  // under comm_mutex alone by on_comm, hence atomic.
  std::atomic<bool> aborted{false};
  std::string failure;  // the first error; every later call throws it
  std::vector<std::shared_ptr<NcclWork>> in_flight;
  // Finished works the watchdog took out of in_flight. The issuing thread drops them (launch(),
  // the destructor): the last reference to a kept-alive tensor frees it into the caching
  // allocator, whose lock may be held across a cudaFree that waits for a stuck collective, and
  // the watchdog must stay free to abort that collective.
  std::vector<std::shared_ptr<NcclWork>> retired;

  // Records the error and tells the log at once (the issuing thread may be busy elsewhere).
  // Returns the communicator the caller must abort (so that its kernels stop waiting for peers)
  // once it has released the mutex, or null when it is gone or already being aborted: the abort
  // can take long, and meanwhile every other thread must see the failure, not wait for the lock.
  // `aborted` is set here, under the lock, so nothing calls the communicator after this.
  [[nodiscard]] ncclComm_t fail_locked(const std::string& message) {
    if (failure.empty()) {
      failure = message;
      std::cerr << "kestrel: " << message << std::endl;
    }
    if (!comm || aborted) return nullptr;
    aborted = true;
    return comm;
  }

  // Asks NCCL for an asynchronous error (unless the group already failed); on one, records it
  // and returns the communicator to abort, as fail_locked.
  [[nodiscard]] ncclComm_t check_async_locked() {
    if (aborted || !comm || !failure.empty()) return nullptr;
    const ncclResult_t async = async_state();
    if (async == ncclSuccess || async == ncclInProgress || aborted) return nullptr;
    return fail_locked(str("rank ", rank, ": NCCL reported an error: ", ncclGetErrorString(async),
                           " (", last_error(),
                           "); the communicator was aborted; a peer may have died; see its log"));
  }

  // One call on the communicator, alone on it (comm_mutex); ncclInvalidUsage, without calling,
  // once it is aborted or gone.
  template <class Call>
  ncclResult_t on_comm(Call&& call) {
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (aborted || !comm) return ncclInvalidUsage;
    return call(comm);
  }
  ncclResult_t async_state() {
    return on_comm([](ncclComm_t c) {
      ncclResult_t r = ncclSuccess;
      const ncclResult_t call = ncclCommGetAsyncError(c, &r);
      return call == ncclSuccess ? r : call;
    });
  }
  std::string last_error() {
    std::string text;
    on_comm([&](ncclComm_t c) {
      text = ncclGetLastError(c);
      return ncclSuccess;
    });
    return text;
  }

  // A non-blocking communicator answers ncclInProgress until an operation is fully issued; waits
  // for it to settle, up to the timeout. The caller holds issue_mutex, not mutex or comm_mutex:
  // each look takes comm_mutex alone, so the watchdog works between looks, and an abort meanwhile
  // ends the wait (ncclInvalidUsage; `failure` says why).
  ncclResult_t settle(ncclResult_t r) {
    const auto deadline = Clock::now() + timeout;
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      r = async_state();
    }
    return r;
  }

  // Aborts a communicator fail_locked handed out; called without mutex (an abort can take long,
  // and meanwhile every other thread must see the failure, not wait for the lock).
  void abort(ncclComm_t doomed) {
    std::lock_guard<std::mutex> lock(comm_mutex);
    ncclCommAbort(doomed);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclProcessGroup::State> state, std::string what, Event done,
           std::vector<Tensor> keep_alive, bool host_wait, bool captured)
      : state_(std::move(state)),
        what_(std::move(what)),
        done_(std::move(done)),
        keep_alive_(std::move(keep_alive)),
        host_wait_(host_wait),
        captured_(captured),
        started_(Clock::now()) {}

  void wait() override {
    if (host_wait_) return synchronize();
    throw_if_failed();
    const Stream current = current_stream(state_->device);
    // A captured collective's event marks a node of the graph: waiting on it joins the
    // communication stream back into the capture, which only the capture itself can do.
    KESTREL_CHECK(!captured_ || is_capturing(current), "nccl Work::wait: ", what_,
                  " was captured into a CUDA graph; wait for it inside that capture, before "
                  "capture_end (the graph then orders it at every replay)");
    done_.wait(current);
  }
  void synchronize() override {
    refuse_if_captured("synchronize");
    note_host_sync("nccl Work::synchronize");
    while (!done_.query()) {
      throw_if_failed();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // An aborted collective also "finishes", with garbage; and an error NCCL has reported may
    // not have been seen by the watchdog yet (it looks every 20 ms): ask NCCL now.
    poll_async_error();
    throw_if_failed();
  }
  bool is_completed() override {
    refuse_if_captured("is_completed");
    if (!done_.query()) {
      std::lock_guard<std::mutex> lock(state_->mutex);
      return !state_->failure.empty();
    }
    poll_async_error();  // completed: with a result, or with an error its waiter will throw
    return true;
  }

  const std::string& what() const { return what_; }
  bool finished() const { return done_.query(); }
  Clock::duration age() const { return Clock::now() - started_; }

 private:
  void refuse_if_captured(const char* op) const {
    KESTREL_CHECK(!captured_, "nccl Work::", op, ": ", what_,
                  " was captured into a CUDA graph: it runs only when the graph is replayed and "
                  "the host cannot wait for it; use Work::wait() inside the capture, and "
                  "synchronise the replay's stream after replay()");
  }
  void throw_if_failed() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    KESTREL_CHECK(state_->failure.empty(), state_->failure);
  }
  // Records an error NCCL reports now as the group's failure, aborting the communicator outside
  // the lock, as the watchdog would on its next look.
  void poll_async_error() {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (const ncclComm_t doomed = state_->check_async_locked()) {
      lock.unlock();
      state_->abort(doomed);
    }
  }

  std::shared_ptr<NcclProcessGroup::State> state_;
  std::string what_;
  Event done_;
  std::vector<Tensor> keep_alive_;  // the tensors' memory must outlive the collective
  bool host_wait_;
  bool captured_;  // recorded inside a CUDA graph capture: not watched, never waited on the host
  Clock::time_point started_;
};

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
  }
  KESTREL_FAIL("nccl: unknown dtype");
}

// One look at the issued work, under the lock: the communicator to abort when it failed or a
// collective ran past the timeout, else null.
ncclComm_t check_work_locked(NcclProcessGroup::State& s) {
  try {
    // Finished work is retired, for the issuing thread to let go of its tensors (after an abort
    // too: aborted kernels finish).
    const auto done = std::stable_partition(s.in_flight.begin(), s.in_flight.end(),
                                            [](const auto& w) { return !w->finished(); });
    std::move(done, s.in_flight.end(), std::back_inserter(s.retired));
    s.in_flight.erase(done, s.in_flight.end());
    if (s.aborted) return nullptr;
    if (const ncclComm_t doomed = s.check_async_locked()) return doomed;
    for (const auto& w : s.in_flight)
      if (w->age() >= s.timeout)
        return s.fail_locked(str("rank ", s.rank, ": timed out after ", format_duration(s.timeout),
                                 " waiting for NCCL ", w->what(),
                                 "; the communicator was aborted; a "
                                 "peer may have died or be stuck; see its log"));
  } catch (const std::exception& e) {
    return s.fail_locked(str("rank ", s.rank, ": CUDA error while checking NCCL work: ", e.what()));
  }
  return nullptr;
}

// Checks the issued work and times it, until told to stop. The abort runs without the lock.
void watchdog_loop(const std::shared_ptr<NcclProcessGroup::State>& s) {
  ncclComm_t doomed = nullptr;
  try {
    set_thread_device(s->device);  // not a DeviceGuard: see set_thread_device
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(s->mutex);
    doomed = s->fail_locked(str("rank ", s->rank, ": the NCCL watchdog cannot use ",
                                s->device.str(), ": ", e.what()));
  }
  if (doomed) s->abort(doomed);
  std::unique_lock<std::mutex> lock(s->mutex);
  while (!s->stop_cv.wait_for(lock, milliseconds(20), [&] { return s->stopping; })) {
    if (ncclComm_t doomed = check_work_locked(*s)) {
      lock.unlock();
      s->abort(doomed);
      lock.lock();
    }
  }
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<TcpStore> store, const DistOptions& options,
                                   Device device)
    : ProcessGroup(options.rank, options.world_size, std::move(store)),
      device_(device),
      state_(std::make_shared<State>()) {
  KESTREL_CHECK(device.is_cuda(), "NcclProcessGroup needs a CUDA device, got ", device.str());
  KESTREL_CHECK(this->store() || size() == 1, "NcclProcessGroup: a group of ", size(),
                " ranks needs a rendezvous store");
  state_->rank = rank();
  state_->device = device;
  state_->timeout = options.timeout;

  ncclUniqueId id;
  if (rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    KESTREL_CHECK(r == ncclSuccess, "rank 0: ncclGetUniqueId failed: ", ncclGetErrorString(r));
    if (this->store()) this->store()->set("nccl/id", std::string(id.internal, sizeof id.internal));
  } else {
    const std::string bytes = this->store()->get("nccl/id");
    KESTREL_CHECK(bytes.size() == sizeof id.internal, "rank ", rank(),
                  ": malformed NCCL unique id in the rendezvous store (", bytes.size(), " bytes)");
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }

  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  KESTREL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  stream_ = Stream::create(device, greatest);  // communication should not queue behind compute

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing peer cannot block us past the timeout
  // No other thread sees the state yet (the watchdog starts below); the locks keep the rule.
  std::lock_guard<std::mutex> issue(state_->issue_mutex);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size(), id, rank(), &config);
  {
    std::scoped_lock lock(state_->mutex, state_->comm_mutex);
    state_->comm = comm;
  }
  if (comm) r = state_->settle(r);
  if (r != ncclSuccess) {
    const std::string why = r == ncclInProgress
                                ? str("did not finish within ", format_duration(state_->timeout),
                                      "; a peer may have died or not started; see its log")
                                : str("failed: ", ncclGetErrorString(r));
    if (comm) state_->abort(comm);
    KESTREL_FAIL("rank ", rank(), ": NCCL communicator setup for ", size(), " ranks on ",
                 device.str(), " ", why);
  }
  watchdog_ = std::thread(watchdog_loop, state_);
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->stop_cv.notify_all();
  watchdog_.join();
  // Destructors must not throw: problems here are reported and the communicator aborted. The
  // lock is held only around calls on the communicator, so that works held elsewhere can still
  // ask for their state meanwhile.
  DeviceGuard guard(device_);
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->aborted) return;
  }
  const auto deadline = Clock::now() + state_->timeout;
  cudaError_t e;
  while ((e = cudaStreamQuery(stream_.handle())) == cudaErrorNotReady && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  std::unique_lock<std::mutex> issue(state_->issue_mutex);
  ncclResult_t r = ncclInternalError;
  if (e == cudaSuccess) r = state_->settle(state_->on_comm([](ncclComm_t c) { return ncclCommFinalize(c); }));
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (r == ncclSuccess) {
    std::lock_guard<std::mutex> comm_lock(state_->comm_mutex);
    ncclCommDestroy(state_->comm);
    state_->comm = nullptr;
  } else {
    const ncclComm_t doomed = state_->fail_locked(
        str("rank ", rank(), ": NCCL work still pending at shutdown; aborting the communicator"));
    lock.unlock();
    if (doomed) state_->abort(doomed);
    lock.lock();
  }
  state_->in_flight.clear();
  state_->retired.clear();
}

void NcclProcessGroup::check_tensor(const Tensor& t, const char* op) const {
  KESTREL_CHECK(t.defined() && t.device() == device_, "nccl ", op, ": the group works on ",
                device_.str(), " tensors, got ",
                t.defined() ? t.describe() : "an undefined tensor");
  KESTREL_CHECK(t.is_contiguous(), "nccl ", op,
                ": collectives work in place on contiguous "
                "tensors, got a strided ",
                t.describe(), "; call .contiguous() first");
}

std::shared_ptr<Work> NcclProcessGroup::launch(
    const std::string& what, std::vector<Tensor> keep_alive,
    const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call, bool host_wait) {
  DeviceGuard guard(device_);
  const Stream caller = current_stream(device_);
  // Inside a CUDA graph capture the wait below forks the communication stream into the capture,
  // the collective and `done` are captured, and Work::wait joins them back.
  const bool captured = is_capturing(caller);
  Event ready(device_);
  ready.record(caller);
  ready.wait(stream_);
  Event done(device_);
  std::vector<std::shared_ptr<NcclWork>> retired;  // dropped after the locks (State::retired)
  std::unique_lock<std::mutex> issue(state_->issue_mutex);
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    retired.swap(state_->retired);
    KESTREL_CHECK(state_->failure.empty(), "rank ", rank(), ": cannot start NCCL ", what,
                  ": the process group failed earlier: ", state_->failure);
  }
  const ncclResult_t r = state_->settle(
      state_->on_comm([&](ncclComm_t comm) { return call(comm, stream_.handle()); }));
  if (r != ncclSuccess) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    // Aborted while it settled (the watchdog saw an error or a timeout): that is the reason.
    KESTREL_CHECK(state_->failure.empty(), "rank ", rank(), ": NCCL ", what,
                  " was not issued: ", state_->failure);
    const std::string message =
        r == ncclInProgress
            ? str("rank ", rank(), ": NCCL ", what, " could not be issued within ",
                  format_duration(state_->timeout), "; a peer may have died; see its log")
            : str("rank ", rank(), ": NCCL ", what, " failed: ", ncclGetErrorString(r), " (",
                  state_->last_error(), ")");
    const ncclComm_t doomed = state_->fail_locked(message);
    lock.unlock();
    if (doomed) state_->abort(doomed);
    KESTREL_FAIL(message);
  }
  done.record(stream_);
  auto work =
      std::make_shared<NcclWork>(state_, what, done, std::move(keep_alive), host_wait, captured);
  // A captured collective runs at each replay, not now: its event would never complete on the
  // host (querying it is even illegal), so the watchdog does not watch it.
  if (!captured) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->in_flight.push_back(work);
  }
  return work;
}

void NcclProcessGroup::watch_stream(const std::string& what) {
  DeviceGuard guard(device_);
  const Stream caller = current_stream(device_);
  refuse_during_capture(caller, "NcclProcessGroup::watch_stream",
                        "watch the replay of the graph, after launching it");
  Event done(device_);
  done.record(caller);
  std::vector<std::shared_ptr<NcclWork>> retired;  // dropped after the lock (State::retired)
  std::lock_guard<std::mutex> lock(state_->mutex);
  retired.swap(state_->retired);
  KESTREL_CHECK(state_->failure.empty(), "rank ", rank(), ": ", what,
                " cannot go on: the process group failed earlier: ", state_->failure);
  state_->in_flight.push_back(std::make_shared<NcclWork>(state_, what, done, std::vector<Tensor>{},
                                                         /*host_wait=*/false, /*captured=*/false));
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  KESTREL_CHECK(op == ReduceOp::Sum || is_floating(t.dtype()),
                "nccl all_reduce: Average of the integer tensor ", t.describe(),
                " would truncate; reduce with Sum and divide as you need");
  const ncclRedOp_t nccl_op = op == ReduceOp::Sum ? ncclSum : ncclAvg;
  return launch(
      "all_reduce of " + t.describe(), {t},
      [&](ncclComm_t comm, cudaStream_t s) {
        return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nccl_op,
                             comm, s);
      },
      false);
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  KESTREL_CHECK(root >= 0 && root < size(), "nccl broadcast: root ", root,
                " is not a rank of this group of ", size());
  return launch(
      str("broadcast from rank ", root, " of ", t.describe()), {t},
      [&](ncclComm_t comm, cudaStream_t s) {
        return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), root,
                             comm, s);
      },
      false);
}

std::shared_ptr<Work> NcclProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  check_tensor(out, "all_gather");
  check_tensor(in, "all_gather");
  KESTREL_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * size(),
                "nccl all_gather: out must hold ", size(),
                " x in.numel() elements of in's type; "
                "got out ",
                out.describe(), " and in ", in.describe());
  return launch(
      "all_gather of " + in.describe(), {out, in},
      [&](ncclComm_t comm, cudaStream_t s) {
        return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.dtype()), comm,
                             s);
      },
      false);
}

std::shared_ptr<Work> NcclProcessGroup::barrier() {
  refuse_during_capture(current_stream(device_), "NCCL barrier",
                        "a barrier waits on the host; call it outside the capture");
  // NCCL has no barrier: a one-element all-reduce orders every rank behind every other.
  Tensor token;
  {
    StreamGuard on_comm(stream_);
    token = Tensor::zeros({1}, DType::I32, device_);
  }
  return launch(
      "barrier", {token},
      [&](ncclComm_t comm, cudaStream_t s) {
        return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum, comm, s);
      },
      true);
}

}  // namespace kestrel::dist
