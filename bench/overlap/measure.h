// The measuring half of `overlap`: a worker process (one rank of a Gloo group on the CPU) runs
// forward + backward with the Reducer for every (overlap on/off, bucket cap) configuration and
// rank 0 records what happened:
//   - one JSON line per configuration on stdout (medians over the timed steps),
//   - <out>/timeline.csv: per step and bucket, the bucket's size and ready/launch/done times
//     (rank 0; other ranks write timeline_rank<R>.csv),
//   - <out>/profile_w<N>.csv: when each parameter's gradient became ready in the no-overlap run
//     at the first cap (backward undisturbed by communication), the simulator's input;
//   - <out>/alone.csv (alone_reps > 0): per cap, the same buckets all-reduced back to back with no
//     compute at all, alone_reps times: what the communication costs by itself;
//   - <out>/trace_cap<C>.json: the overlap runs' steps as a Chrome trace (what `kestrel train
//     --trace` writes).
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
  int alone_reps = 0;
  double edge_bucket_mb = 0.25;  // dist::ReducerOptions::edge_bucket_cap_mb (0: off)
  bool timed_buckets = true;     // dist::ReducerOptions::timed_buckets
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
  double start_us = 0;  // when the step began, on the machine's steady clock (0 in older files)
};

std::vector<TimelineRow> read_timeline_csv(const std::string& path);
// One row of alone.csv: bucket `bucket` of repetition `rep` took `us` (from its predecessor's
// finish, or from the start for the first) when only communication ran.
struct AloneRow {
  int world = 0;
  double cap_mb = 0;
  int rep = 0;
  int bucket = 0;
  int64_t bytes = 0;
  double us = 0;
};
std::vector<AloneRow> read_alone_csv(const std::string& path);

// profile_w<N>.csv back into a simulator profile (gradients in arrival order).
Profile read_profile_csv(const std::string& path);

}  // namespace kestrel::bench::overlap
