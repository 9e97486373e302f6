// The measuring half of `overlap`: a worker process (one rank of a Gloo group on the CPU) runs
// forward + backward with the Reducer for every (overlap on/off, bucket cap) configuration and
// rank 0 records what happened:
//   - one JSON line per configuration on stdout (medians over the timed steps),
//   - <out>/timeline.csv: per step and bucket, the bucket's size and ready/launch/done times,
//   - <out>/profile_w<N>.csv: when each parameter's gradient became ready in the no-overlap run
//     at the first cap (backward undisturbed by communication), the simulator's input.
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/simulator.h"

namespace kestrel::bench::overlap {

struct MeasureOptions {
  std::string model = "yolov5n";
  int img_size = 128;
  int batch = 2;  // per rank
  int steps = 6;
  int warmup = 1;
  std::vector<double> caps_mb{1, 2, 4, 8, 25};
  std::string out_dir = "overlap_out";
};

// Runs inside a process started with RANK / WORLD_SIZE / MASTER_* set (dist::launch_workers).
int run_measure_worker(const MeasureOptions& options);

// One row of timeline.csv.
struct TimelineRow {
  int world = 0;
  double cap_mb = 0;
  bool overlap = false;
  int step = 0;
  double step_us = 0, pre_us = 0, backward_us = 0, finalize_us = 0;
  int bucket = 0;
  int64_t bytes = 0;
  double ready_us = 0, launch_us = 0, done_us = 0;  // since backward started
};

std::vector<TimelineRow> read_timeline_csv(const std::string& path);
// profile_w<N>.csv back into a simulator profile (gradients in arrival order).
Profile read_profile_csv(const std::string& path);

}  // namespace kestrel::bench::overlap
