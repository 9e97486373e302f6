// When a training step runs eagerly, is captured into a CUDA graph, or replays one (TrainStep's
// graph mode). Pure bookkeeping, tested on the CPU:
//   - a step's shape (StepKey: the input's shape and dtype, the padded target rows, whether an
//     optimizer step follows) names its graph; a new shape is captured again;
//   - nothing is captured before `warmup_steps` eager optimizer steps (DDP re-lays out its
//     gradient buckets after the first, gradients and optimizer state appear on the first ones)
//     nor before the shape has run eagerly once (cuDNN chooses its algorithms per shape on a
//     first run; a capture cannot search);
//   - a graph bakes in the addresses of everything the step touches outside its own memory
//     (parameters, gradients, optimizer and EMA state, BN buffers). The caller fingerprints
//     them; when the fingerprint changes, every graph is dropped and, once it has been stable
//     across one eager step, captured again. A run whose addresses keep changing (more than
//     kMaxInvalidations drops) goes on eagerly, and says why (disabled_reason());
//   - at most `max_graphs` shapes get a graph (their memory pool is shared, but each
//     instantiated graph and its capture cost something); later shapes run eagerly.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace kestrel::yolo {

struct StepKey {
  std::vector<int64_t> x_shape;
  DType x_dtype = DType::F32;
  int64_t target_rows = 0;
  bool step_now = false;
  auto operator<=>(const StepKey&) const = default;
  std::string describe() const;  // "2x64x64x3 float32, 64 target rows, optimizer step"
};

struct GraphStats {
  int64_t eager_steps = 0;    // batches run eagerly while graphs were on
  int64_t captures = 0;       // graphs captured
  int64_t replays = 0;        // batches run by replaying a graph
  int64_t invalidations = 0;  // times every graph was dropped (addresses changed)
};

// Whether a failed capture stops the run: as asked (--cuda-graph on), and always with several
// processes, whose ranks must capture and replay at the same batches (NCCL's rule for captured
// collectives), which one rank falling back to eager steps alone would break.
inline bool capture_failure_stops_run(bool asked, int world) { return asked || world > 1; }

class StepGraphPolicy {
 public:
  enum class Action { Eager, Capture, Replay };

  static constexpr int64_t kMaxInvalidations = 8;

  explicit StepGraphPolicy(int warmup_steps, int max_graphs = 16);

  // What to do for the next batch. `fingerprint`: the addresses its graphs would bake in. When
  // it differs from the live graphs' fingerprint, must_drop() turns true until the caller has
  // destroyed them (acknowledge_drop()), and the batch runs eagerly.
  Action decide(const StepKey& key, uint64_t fingerprint);
  bool must_drop() const { return must_drop_; }
  void acknowledge_drop();
  // Reports of what the caller did with the decision.
  void ran_eager(const StepKey& key);
  void captured(const StepKey& key);
  void replayed() { ++stats_.replays; }
  // No more graphs for this run (a capture failed): every later batch runs eagerly.
  void give_up(const std::string& reason);

  const GraphStats& stats() const { return stats_; }
  // Non-empty once graphs were given up for this run.
  const std::string& disabled_reason() const { return disabled_; }

 private:
  int warmup_steps_;
  size_t max_graphs_;
  int64_t eager_optimizer_steps_ = 0;
  std::map<StepKey, int> eager_runs_;  // per shape, since the last drop
  std::map<StepKey, bool> graphs_;     // shapes with a live graph
  uint64_t graphs_fingerprint_ = 0;    // what the live graphs baked in
  uint64_t last_fingerprint_ = 0;      // seen at the previous decide()
  bool have_last_ = false;
  bool must_drop_ = false;
  std::string disabled_;
  GraphStats stats_;
};

}  // namespace kestrel::yolo
