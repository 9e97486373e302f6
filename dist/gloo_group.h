// The Gloo process group: collectives over TCP (libgloo's transport) for CPU tensors, and for CUDA
// tensors staged through pinned host memory (how several processes share one GPU in tests, and how
// the CPU build trains with several processes).
//
// Collectives run one at a time, in issue order, on one worker thread; the issuing thread only
// queues them (for a CUDA tensor it also queues the device-to-host copy on its current stream, so
// the collective sees the values the stream computed). Sums are computed in the tensor's type;
// f16/bf16 travel and add as f32 and round once at the end. Gloo's own timeout bounds every
// collective: a dead or stuck peer fails the work (and every later one) with an Error naming the
// rank, never a hang; the message then names the peers whose hosts no longer answer (dist/
// peer_probe.h), from the addresses the ranks published in the store at start-up. Creating a group sets SIGPIPE to ignored (if it had its default action), so
// that writing to a dead peer's socket fails the collective instead of killing the process.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/peer_probe.h"
#include "dist/process_group.h"
#include "dist/store.h"

namespace gloo {
class Context;
}

namespace kestrel::dist {

class GlooWork;

class GlooProcessGroup : public ProcessGroup {
 public:
  // store: the job's rendezvous store, or null for a single-rank group (no networking at all).
  GlooProcessGroup(std::shared_ptr<TcpStore> store, const DistOptions& options);
  // Finishes every queued collective (other ranks expect them), then stops the worker.
  ~GlooProcessGroup() override;

  std::string backend() const override { return "gloo"; }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) override;
  std::shared_ptr<Work> barrier() override;

 private:
  struct Task {
    std::shared_ptr<GlooWork> work;
    std::string what;           // "all_reduce of float32[1001]", for error messages
    std::function<void()> run;  // the collective and its staging, on the worker thread
  };
  std::shared_ptr<Work> enqueue(std::string what, std::function<void()> run);
  void worker_loop();
  uint32_t next_tag() { return tag_++; }

  // Why a collective failed, naming the peers that stopped answering.
  std::string diagnose_peers() const;

  std::chrono::milliseconds timeout_;
  std::vector<PeerHost> peers_;  // every other rank and its host's address
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;  // worker thread only: collectives get consecutive tags on every rank
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  // Worker thread only: the first error (later collectives fail fast), and per CUDA device the
  // stream that copies staged results back.
  std::string failure_;
  std::map<int, Stream> copy_streams_;
  std::thread worker_;
};

}  // namespace kestrel::dist
