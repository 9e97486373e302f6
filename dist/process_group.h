// Collective communication between the ranks of a data-parallel job.
//
// One ProcessGroup per rank, used from one issuing thread: every rank issues the same collectives
// in the same order (NCCL deadlocks otherwise, and Gloo would pair the wrong buffers). Collectives
// are asynchronous and work in place on contiguous tensors. Backends: "gloo" (TCP; CPU tensors,
// and CUDA tensors staged through pinned host memory) and "nccl" (CUDA tensors, on the group's
// communication stream).
//
// Collectives fail after the group's timeout (a dead or stuck peer). Phases that rank 0 runs alone
// (label caches, validation, plots, checkpoints) may take much longer than that: the other ranks
// wait them out in wait_for_all_ranks, which runs through the rendezvous store under a limit of
// its own, so no collective is pending while rank 0 works.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "engine/stream.h"
#include "engine/tensor.h"

namespace kestrel::dist {

class TcpStore;

// The reference's: YOLOv5's train.py initialises its process group with a 3-hour timeout.
inline constexpr std::chrono::seconds kDefaultTimeout{10800};

enum class ReduceOp { Sum, Average };

// A started collective.
class Work {
 public:
  virtual ~Work() = default;
  // Orders later work after the collective without blocking the host where possible: for a CUDA
  // tensor the device's current stream waits for it; for a CPU tensor the host waits.
  virtual void wait() = 0;
  // Blocks the host until the collective has finished (its result is readable on the host).
  virtual void synchronize() = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;

  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  // out holds size() * in.numel() elements: rank r's `in` lands at offset r * in.numel().
  virtual std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

  // Times the work enqueued so far on the device's current stream as this group times its own
  // collectives, and throws if the group has failed. For a CUDA graph replay: the collectives
  // captured into a graph run at each replay, where the group never sees them issued, so the
  // replayer hands the group the replay to watch (a stuck peer then aborts the communicator after
  // the timeout, and the next call throws, as for an eager collective). `what` names the work in
  // the timeout's message. Groups whose collectives cannot be captured (gloo) have nothing to do.
  virtual void watch_stream(const std::string& what) { (void)what; }

  // Returns once every rank has called it (all ranks call it in the same order, with the same
  // `phase`), waiting up to `limit` and not the collectives' timeout; issues no collective. For
  // the other ranks to wait while rank 0 works alone. A rank that does not arrive within `limit`
  // fails the wait with an Error naming the phase; rank 0 dying (it hosts the store) fails it at
  // once. Groups without a store (a single rank, or the in-process test fake) use barrier().
  void wait_for_all_ranks(const std::string& phase, std::chrono::milliseconds limit);

 protected:
  ProcessGroup(int rank, int size, std::shared_ptr<TcpStore> store = nullptr);
  // The job's rendezvous store (null for a single rank), kept serving while the group lives.
  const std::shared_ptr<TcpStore>& store() const { return store_; }

 private:
  int rank_, size_;
  std::shared_ptr<TcpStore> store_;
  int64_t phases_ = 0;  // wait_for_all_ranks calls so far: the same count on every rank
};

// Where this process sits in the job and how to reach rank 0's store.
struct DistOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::seconds timeout = kDefaultTimeout;  // a dead or stuck peer fails collectives after this long
  int restart_count = 0;  // which restart of an elastic job this is (KESTREL_RESTART_COUNT): see dist/store.h
  // torchrun's agent serves PyTorch's store at master_addr:master_port (dist/torch_store.h): rank
  // 0 then hosts Kestrel's store on a free port and posts where through the agent's store.
  bool torch_agent_store = false;
};

// Connects to the other ranks (rank 0 hosts the rendezvous store) and returns the group.
// backend: "gloo" or "nccl"; device: the device this rank computes on.
std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend,
                                                 const DistOptions& options, Device device);

}  // namespace kestrel::dist
