// The NCCL process group: collectives on CUDA tensors of one device, on the group's own
// high-priority communication stream.
//
// Each collective first makes the communication stream wait for an event recorded on the caller's
// current stream (so it sees the values computed so far), runs, and records a completion event;
// Work::wait() makes the caller's current stream wait for that event without blocking the host.
// The communicator is non-blocking, and a watchdog thread checks it every few milliseconds
// (ncclCommGetAsyncError) and times every collective: on an NCCL error, or a collective running
// past the timeout (a dead or stuck peer), it aborts the communicator, which unblocks the GPU, and
// every pending and later call on the group throws an Error naming the rank.
//
// CUDA graphs (engine/cuda_graph.h): a collective issued while the caller's current stream is
// being captured is captured too (NCCL supports it): the communication stream joins the capture
// through the `ready` event, and Work::wait(), which must then be called inside the same capture,
// joins it back (without it capture_end fails). Such a Work runs at every replay, not now: the
// watchdog cannot time it (the replayer times each replay instead, through watch_stream; NCCL's
// own errors are reported either way), its synchronize() and is_completed() throw, and it keeps
// its tensors (in the graph's pool, or static ones the caller keeps for the graph anyway) until
// it is dropped. While the
// communication stream is inside a capture, every collective issued on the group is captured:
// during a capture the group belongs to it. barrier() refuses to run in a capture.
#pragma once
#include <nccl.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "dist/process_group.h"
#include "dist/store.h"
#include "engine/stream.h"

namespace kestrel::dist {

class NcclProcessGroup : public ProcessGroup {
 public:
  // store: the job's rendezvous store (carries the NCCL unique id), or null for a single rank.
  NcclProcessGroup(std::shared_ptr<TcpStore> store, const DistOptions& options, Device device);
  // Lets issued collectives finish (up to the timeout), then releases the communicator.
  ~NcclProcessGroup() override;

  std::string backend() const override { return "nccl"; }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) override;
  // Its wait() blocks the host, as a barrier should.
  std::shared_ptr<Work> barrier() override;
  // Records an event on the current stream and times it like a collective (process_group.h).
  void watch_stream(const std::string& what) override;

  const Stream& stream() const { return stream_; }  // the communication stream

  struct State;  // communicator, failure and in-flight work, shared with the watchdog and works

 private:
  void check_tensor(const Tensor& t, const char* op) const;
  std::shared_ptr<Work> launch(const std::string& what, std::vector<Tensor> keep_alive,
                               const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call,
                               bool host_wait);

  Device device_;
  Stream stream_;
  std::shared_ptr<State> state_;
  std::thread watchdog_;
};

}  // namespace kestrel::dist
