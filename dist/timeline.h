// What one training step's gradient communication looked like: when backward ran, when each
// bucket became ready, was launched and was seen finished, and how much of the all-reduce time
// backward hid. The Reducer fills one StepTimeline per synchronised step; TraceWriter turns steps
// into a Chrome trace (chrome://tracing, Perfetto) for `--trace FILE`.
//
// Times are host clock readings (steady_clock, microseconds). "done" is the first moment the host
// saw the collective finished (the Reducer polls at every gradient hook and at finalize), so it is
// an upper bound on the true finish by at most the gap between two hooks; on CUDA, backward times
// are when the host issued the work, which runs ahead of the device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::dist {

// Microseconds on the steady clock (monotonic; only differences mean anything).
double now_us();

struct BucketTiming {
  int64_t bytes = 0;
  int num_params = 0;
  double ready_us = -1;   // its last gradient arrived (or finalize found it unused)
  double launch_us = -1;  // the all-reduce call returned
  double done_us = -1;    // first seen finished
};

struct StepTimeline {
  int64_t step = 0;
  double backward_start_us = -1;  // prepare_for_backward()
  double backward_end_us = -1;    // finalize() entered: backward has returned
  double finalize_end_us = -1;    // every bucket finished and the gradients are usable
  std::vector<BucketTiming> buckets;
};

// Share of the communication stream's busy time (the union of the buckets' launch-to-done spans:
// queued collectives are not counted twice) that lies inside backward, in [0, 1]; 1 when there
// was no communication at all.
double overlap_efficiency(const StepTimeline& t);
// That busy time, and the part of it after backward.
double communication_us(const StepTimeline& t);
double exposed_communication_us(const StepTimeline& t);

// Chrome trace events of one rank: process = rank, thread 0 = compute (backward, finalize wait),
// thread 1 = communication (one slice per bucket, with its size), instant events for readiness.
class TraceWriter {
 public:
  explicit TraceWriter(int rank) : rank_(rank) {}
  void add(const StepTimeline& t);
  // {"traceEvents": [...], "displayTimeUnit": "ms"}, timestamps relative to the first step.
  std::string json() const;
  // Writes json() to path through a temporary file and a rename (never a torn trace).
  void write(const std::string& path) const;
  size_t steps() const { return steps_.size(); }

 private:
  int rank_;
  std::vector<StepTimeline> steps_;
};

}  // namespace kestrel::dist
