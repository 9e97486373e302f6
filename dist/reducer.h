// Data-parallel gradient averaging, overlapped with backward.
//
// Every parameter's .grad is a view into one flat buffer per dtype, laid out in the order backward
// produces gradients, so a bucket is one contiguous slice and one all-reduce (no packing copies).
// AccumulateGrad adds into those views in place. A parameter's grad-ready hook marks it; when all
// of a bucket's gradients are in (and every earlier bucket has been launched, so all ranks issue
// the same sequence) the bucket's all-reduce starts; for NCCL the process group orders it after
// the compute stream's work so far, for Gloo it runs on the group's worker thread while backward
// goes on. finalize() makes later work wait for every bucket.
//
// One step:
//   reducer.prepare_for_backward();   // before loss.backward()
//   loss.backward();
//   reducer.finalize();               // before the optimizer reads .grad
//   optimizer.step(); reducer.zero_grad();
//
// Scaling: buckets are all-reduced with ReduceOp::Average, so the gradient is the mean of the
// ranks' gradients. With equal per-rank batches, a per-rank loss that is a mean over the local
// batch gives exactly the single-process gradient of the mean over the whole batch. A loss that
// grows with the batch (YOLOv5's loss * batch_size) must be multiplied by the world size, as the
// reference does, to match single-process training on the whole batch.
//
// Buckets start in reverse registration order (roughly the order backward reaches parameters);
// after the first synchronised step they are re-laid out once in the arrival order rank 0 observed
// (broadcast and read back on the host, so identical on every rank: the one host synchronisation
// of the Reducer, at its first step), parameters it never saw last. The cap is bytes per
// bucket: small enough that the first bucket launches early in backward, large enough that
// per-collective latency stays small (see kDefaultBucketCapMb).
//
// Timed buckets (ReducerOptions::timed_buckets, `kestrel train --timed-buckets`, off by default;
// CPU ranks with overlap on): after
// the second synchronised step, the first in the arrival-order layout, the buckets are cut once
// more, now by time: rank 0 takes that step's gradient arrival times and what each bucket's
// all-reduce cost beside backward, and cuts where a model of the link says the last all-reduce
// ends soonest (dist/timed_layout.h), never above the cap; the cuts are broadcast, so every rank
// gets rank 0's layout (a second host synchronisation, once). A large cap then no longer leaves
// one big bucket that becomes ready late. The layout depends on measured times, so it can differ
// from one run to the next: with more than 2 ranks the sums' rounding may differ with it
// (2 ranks add two numbers, which rounds the same in any bucket), so two separate runs are no
// longer bitwise equal there. That is why it is opt-in. A resumed run is: checkpoints carry the
// settled layout (settled_layout()), which the resumed run adopts (adopt_layout()) instead of
// timing its own.
//
// Parameters that got no gradient in a backward (unused in the forward) are not waited for:
// finalize() all-reduces their gradients as they are (zero after zero_grad()) and reports them in
// unused_parameters(). Every rank must still issue the same collectives in the same order, so a
// parameter used on one rank and unused on another may only differ where backward issues no
// collectives of its own after it (SyncBN layers do).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/grad_compress.h"
#include "dist/process_group.h"
#include "dist/timeline.h"
#include "engine/tensor.h"

namespace kestrel::dist {

class ReadyTracker;  // reducer_state.h

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Chosen by a sweep of the cap on 2-process CPU Gloo with YOLOv5s's 177 gradient tensors (29 MB
// fp32) and a simulated 100 ms backward (equal time per conv layer): caps of 2-8 MB hid 84-92% of
// the all-reduce time behind backward, 16-25 MB (two buckets, PyTorch's default territory) about
// half, one bucket none, and 0.5-1 MB fell back to 50-75% as per-collective latency queued up.
// 4 MB sits in the middle of the good range. Re-measure with NCCL on GPUs, where latency and
// bandwidth differ, before trusting it there (--bucket-cap-mb overrides it).
inline constexpr double kDefaultBucketCapMb = 4.0;
// The first and the last bucket in backward's order hold at most this much (BucketPlan's edge
// buckets). Measured on 2 ranks over links shaped to 0.1-1 Gbit/s (docs/history/distributed.md, Overlap
// where bandwidth is the bottleneck): without them 4 MB buckets cut yolov5n's 7.5 MB gradient into
// 3.8 + 3.4 MB, and the 3.4 MB bucket, ready only when backward ended, stayed exposed whole
// (overlap efficiency 52-54 %; 0-5 % with one bucket at 8-25 MB). 0.25 MiB edges gave 84-97 % at
// 0.5-1 Gbit/s for caps of 1-25 MB (96-97 % at 4 MB), 1 MiB edges (PyTorch DDP's first bucket)
// 84-98 %, the smaller edge ahead at caps of 2-8 MB.
inline constexpr double kDefaultEdgeBucketCapMb = 0.25;

struct ReducerOptions {
  double bucket_cap_mb = kDefaultBucketCapMb;
  double edge_bucket_cap_mb = kDefaultEdgeBucketCapMb;  // 0: edge buckets off (all up to the cap)
  bool overlap = true;          // false: every bucket is launched in finalize() (--no-overlap)
  bool rebuild_buckets = true;  // re-lay out once from the first step's arrival order
  // Then cut once more from the second step's times (needs rebuild_buckets and overlap; CPU only:
  // on CUDA the host sees when work was issued, not when it ran).
  bool timed_buckets = false;
  // Record each step's timeline (ready/launch/done times; the trainer's --trace). Off, a step
  // takes no per-bucket clock readings and no completion polls.
  bool record_timeline = true;
  // fp16/bf16: fp32 buckets are all-reduced in that type (divided by the world size, summed) and
  // widened back in finalize(), as DDP's fp16/bf16_compress_hook (dist/grad_compress.h).
  GradCompress compress = GradCompress::None;
};

class Reducer {
 public:
  // params: the parameters to synchronise (those not requiring grad are skipped), all on one
  // device. Their .grad becomes a view into the flat buffers, zero-filled.
  Reducer(const NamedTensors& params, std::shared_ptr<ProcessGroup> group,
          ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the hooks for one synchronised backward (starts the step's timeline).
  void prepare_for_backward();
  // Launches what is left (unused parameters' buckets; everything under no-overlap), then orders
  // later work after every bucket (Work::wait()). Gradients are averaged afterwards.
  void finalize();
  // Zeroes every gradient in place (the views stay; never set .grad to an undefined tensor).
  void zero_grad();
  // The host state a step changes (sync, the armed hooks, readiness, the step's works, timeline
  // and count), taken before a step that may never run on the device (a CUDA graph capture) and
  // put back if it does not: the next prepare_for_backward() then starts as if the step had not
  // begun. Gradients and device memory are not part of it, nor the bucket layout, which a
  // snapshot taken before the first step's re-layout cannot restore (restore() refuses).
  struct Snapshot {
    bool sync = true, armed = false, rebuilt = false, timed = false;
    int64_t step = 0;
    std::shared_ptr<const ReadyTracker> tracker;
    std::vector<std::shared_ptr<Work>> works;
    StepTimeline timeline;
    std::vector<std::string> unused;
  };
  Snapshot snapshot() const;
  void restore(const Snapshot& s);

  // Gradient accumulation: while sync is off, backward only accumulates locally and
  // prepare_for_backward()/finalize() do nothing; the step with sync on communicates the sum.
  void set_sync(bool sync);
  bool sync() const;

  // The last finalized step's timeline (record_timeline only). On CUDA this waits for
  // collectives whose finish the host has not seen yet: a host synchronisation, for --trace.
  const StepTimeline& last_timeline();
  std::vector<std::string> unused_parameters() const;  // of the last finalized step
  // Parameter names of each bucket, in launch order (for tests and logs).
  std::vector<std::vector<std::string>> bucket_layout() const;

  // The bucket layout once it is settled: after the re-layout from arrival order and, with timed
  // buckets, the timed cuts. Checkpoints carry it so that a resumed run keeps the uninterrupted
  // run's buckets: timed cuts follow measured times, and cut anew they could round the sums of 3+
  // ranks differently. Null until settled.
  struct SettledLayout {
    std::vector<std::string> order;  // parameter names, in the order the buckets take them
    std::vector<bool> cuts;          // the timed cuts, by position in order (empty: none)
    double bucket_cap_mb = 0, edge_bucket_cap_mb = 0;  // the caps it was laid out under
  };
  std::optional<SettledLayout> settled_layout() const;
  // Before the first synchronised step, on every rank alike: lays the buckets out as `layout` (rank
  // 0's copy, broadcast) and skips the re-layout and timing steps. Returns false and changes
  // nothing when the layout was made under other caps or other options (no re-layout, no timed
  // buckets where it has cuts, or the reverse), so the run lays its buckets out as usual. A layout
  // naming other parameters is refused (the checkpoint is of another model).
  bool adopt_layout(const SettledLayout& layout);

 private:
  struct State;
  std::shared_ptr<State> state_;  // hooks hold it weakly: they outlive a destroyed Reducer
};

// Turns gradient synchronisation off for the scope (PyTorch's no_sync()).
class NoSyncGuard {
 public:
  explicit NoSyncGuard(Reducer& reducer) : reducer_(reducer), previous_(reducer.sync()) {
    reducer_.set_sync(false);
  }
  ~NoSyncGuard() { reducer_.set_sync(previous_); }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  Reducer& reducer_;
  bool previous_;
};

}  // namespace kestrel::dist
