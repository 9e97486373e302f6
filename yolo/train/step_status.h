// What the host learns about a training batch, one batch later. Right after a batch's loss the
// device computes its flags (kernels/step_flags: a non-finite loss, this rank's stop request,
// whether it ran the batch as a CUDA graph replay),
// one small all-reduce sums them over the ranks, and they travel to pinned host memory with the
// loss components; the host reads them only after it has issued the next batch's forward and
// backward, so it never waits for work it has just enqueued. Every rank pushes and pops the same
// batches in the same order, so all ranks read the same summed flags at the same batch.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "dist/process_group.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "yolo/train/rank_info.h"

namespace kestrel::yolo {

struct BatchStatus {
  int64_t batch = -1;        // the batch's index over the run (ni)
  int nonfinite_ranks = 0;   // ranks whose loss was inf or NaN
  int stop_ranks = 0;        // ranks that had been asked to stop (SIGINT, SIGTERM)
  int replayed_ranks = 0;    // ranks that ran the batch as a CUDA graph replay
  double box = 0, obj = 0, cls = 0;  // this rank's loss components
  double seg = 0;                    // segmentation's mask term (0 for detection)
  int items = 3;                     // the loss items: 3 (box, obj, cls) or 4 (box, seg, obj, cls)
};

// Every rank runs a batch alike, all as a CUDA graph replay or all eagerly: NCCL requires
// collectives to be captured on every rank or on none, and the ranks' graph decisions are built
// to agree (TrainStepOptions). Throws, naming the batch, when the summed flags show otherwise, so
// a disagreement stops the run with its cause instead of mismatching collectives.
void check_ranks_ran_alike(const BatchStatus& s, int world);

class StepStatusQueue {
 public:
  StepStatusQueue(const RankInfo& rank, Device device);

  // Issues batch `batch`'s flags from its loss summary (kernels::kSummarySize float64 on the
  // device) and this rank's requests (float32 [kStepRequests] on the device: stop, replayed;
  // non-zero for yes; read when the kernel runs): the kernel, then the all-reduce (started, not
  // waited for). Every rank calls
  // it at the same point of the same batch. to_host=false: inside a CUDA graph capture, where the
  // copies to pinned memory must stay out of the graph (see take_captured / push_replayed).
  void push(int64_t batch, const Tensor& summary, const Tensor& requests, bool to_host = true);
  // The same from a task's own loss items: `components`, float64 [3] on the device, whose sum is
  // finite exactly when the loss is (the non-finite flag's input); `items`, float64 [3] (box, obj,
  // cls) or [4] (box, seg, obj, cls) on the device, what the host reads back.
  void push(int64_t batch, const Tensor& components, const Tensor& items, const Tensor& requests,
            bool to_host);
  // The newest batch's flags summed over the ranks (float32 [kStepFlags] on the device), for the
  // device to act on; orders the current stream after the all-reduce (no host wait on CUDA).
  Tensor newest_flags();
  // The oldest batch's status: one host read (a HostSyncGuard counts it) of work issued a batch
  // or more ago, normally finished by now.
  BatchStatus pop();
  size_t pending() const { return entries_.size(); }
  // Whether pop() would find the oldest status already there (it never waits then).
  bool oldest_ready() const;

  // CUDA graphs. A captured step pushes its status with to_host=false; after the capture ends,
  // take_captured() removes that (never run) entry and returns its device tensors, which every
  // replay of the graph rewrites. After each replay, push_replayed() queues the replayed batch:
  // its flags and losses are copied to pinned memory on the current stream at once, before the
  // next replay can overwrite them.
  struct Captured {
    Tensor flags, losses;
  };
  Captured take_captured();
  void push_replayed(int64_t batch, const Captured& outputs);
  // The queue's length, taken before a step that may never run on the device (a CUDA graph
  // capture), and its restore: drops the entries pushed since (a failed capture's, if it got as
  // far as pushing one).
  struct Snapshot {
    size_t entries = 0;
  };
  Snapshot snapshot() const { return {entries_.size()}; }
  void restore(const Snapshot& s);

 private:
  struct Entry {
    int64_t batch;
    Tensor flags;           // device: this rank's, then summed over the ranks
    Tensor losses;          // device: the loss items (box, obj, cls: a view of the loss summary)
    Tensor host_flags, host_losses;  // CUDA: pinned copies
    std::shared_ptr<dist::Work> work;  // the all-reduce (several ranks)
    std::optional<Event> copied;       // CUDA: the copies to pinned memory
    bool flags_ordered = false;        // newest_flags() has ordered the stream after the work
    bool to_host = true;               // copy to pinned memory (false: being captured)
  };
  void order_after_reduce(Entry& e);
  void copy_to_host(Entry& e);

  RankInfo rank_;
  Device device_;
  std::deque<Entry> entries_;
};

}  // namespace kestrel::yolo
