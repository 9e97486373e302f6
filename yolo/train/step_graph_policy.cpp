#include "yolo/train/step_graph_policy.h"

#include <algorithm>

#include "base/error.h"

namespace kestrel::yolo {

std::string StepKey::describe() const {
  std::string shape;
  for (int64_t d : x_shape) {
    if (!shape.empty()) shape += 'x';
    shape += std::to_string(d);
  }
  return ::kestrel::str(shape, " ", dtype_name(x_dtype), ", ", target_rows, " target rows",
                 step_now ? ", optimizer step" : ", accumulating");
}

StepGraphPolicy::StepGraphPolicy(int warmup_steps, int max_graphs)
    : warmup_steps_(warmup_steps), max_graphs_(static_cast<size_t>(std::max(max_graphs, 0))) {
  KESTREL_CHECK(warmup_steps >= 1, "StepGraphPolicy: at least one eager optimizer step must come "
                "before a capture, got ", warmup_steps);
  KESTREL_CHECK(max_graphs >= 1, "StepGraphPolicy: at least one graph, got ", max_graphs);
}

StepGraphPolicy::Action StepGraphPolicy::decide(const StepKey& key, uint64_t fingerprint) {
  KESTREL_CHECK(!must_drop_, "StepGraphPolicy: drop the graphs first (acknowledge_drop)");
  const bool stable = have_last_ && fingerprint == last_fingerprint_;
  last_fingerprint_ = fingerprint;
  have_last_ = true;
  if (!disabled_.empty()) return Action::Eager;
  if (!graphs_.empty() && fingerprint != graphs_fingerprint_) {
    graphs_.clear();
    eager_runs_.clear();
    must_drop_ = true;
    if (++stats_.invalidations > kMaxInvalidations)
      disabled_ = ::kestrel::str("the step's parameter, gradient or state addresses changed ",
                          stats_.invalidations, " times, each time invalidating its CUDA graphs");
    return Action::Eager;
  }
  if (graphs_.count(key)) return Action::Replay;
  if (graphs_.size() >= max_graphs_) return Action::Eager;
  const bool warm = eager_optimizer_steps_ >= warmup_steps_ && eager_runs_[key] >= 1;
  return warm && stable ? Action::Capture : Action::Eager;
}

void StepGraphPolicy::acknowledge_drop() { must_drop_ = false; }

void StepGraphPolicy::give_up(const std::string& reason) {
  disabled_ = reason;
  graphs_.clear();
}

void StepGraphPolicy::ran_eager(const StepKey& key) {
  ++eager_runs_[key];
  if (key.step_now) ++eager_optimizer_steps_;
  ++stats_.eager_steps;
}

void StepGraphPolicy::captured(const StepKey& key) {
  if (graphs_.empty()) graphs_fingerprint_ = last_fingerprint_;
  graphs_[key] = true;
  ++stats_.captures;
}

}  // namespace kestrel::yolo
