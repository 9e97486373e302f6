// What-if model of data-parallel gradient communication: given when backward produced each
// gradient (a measured timeline) and a ring all-reduce cost model, predict the step time with and
// without overlap, the scaling efficiency for N ranks and the best bucket size.
//
// Model (the Reducer's behaviour, dist/reducer.h): gradients are grouped in arrival order into
// buckets of at most `cap` bytes (a larger gradient alone); a bucket launches once its last gradient is in and every
// earlier bucket has launched; collectives run one after another on one communication channel.
// Without overlap every bucket launches when backward ends. Compute is unaffected by
// communication (true for GPUs with a separate comm stream; on a CPU, Gloo competes with backward
// for cores, which the validation shows as error).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::bench::overlap {

// A link's cost: alpha = per-message latency (microseconds; the software's and the wire's own),
// bandwidth in bytes per microsecond, and a one-way propagation delay on top (a long link).
struct Link {
  double alpha_us = 0;
  double bytes_per_us = 1;
  double delay_us = 0;
};

// A cluster: gpus_per_node ranks share a node (intra links); beyond one node the ring crosses
// inter-node links and, every hop waiting for the slowest one, runs at the slowest link's speed.
struct Network {
  Link intra;
  Link inter;
  int gpus_per_node = 8;
  Link link_for(int world_size) const;
};

// Ring all-reduce of `bytes` over n ranks: 2(n-1)/n * bytes / bandwidth + 2(n-1) * alpha, plus
// the link's delay for every round trip the all-reduce waits; 0 for n = 1.
double ring_allreduce_us(int64_t bytes, int world_size, const Link& link);
// The round trips an all-reduce of Kestrel's Gloo group waits (dist/gloo_group.cpp): 1 for 2 ranks
// (one exchange: the notice of a posted receive, then the data), 2(n-1) for Gloo's ring (each step
// waits for both). Each costs 2 x the link's one-way delay.
int allreduce_round_trips(int world_size);

// One gradient (or an indivisible group of them) as backward produced it.
struct GradEvent {
  double ready_us = 0;  // since backward started
  int64_t bytes = 0;
};

// A measured step: forward (and anything before backward) plus backward with its gradients in
// arrival order, plus what follows communication (optimizer).
struct Profile {
  double pre_us = 0;
  double backward_us = 0;
  double post_us = 0;
  std::vector<GradEvent> grads;
};

struct SimBucket {
  int64_t bytes = 0;
  double ready_us = 0;
  double start_us = 0;
  double end_us = 0;
};

// Consecutive gradients in arrival order, as dist::BucketPlan lays them out: a gradient that would
// take the open bucket past cap_bytes opens a new one (one larger than the cap sits alone; the
// Reducer's 256-byte alignment padding is left out); ready when its last gradient is. With
// edge_bytes > 0, BucketPlan's edge buckets: the first bucket holds at most edge_bytes, and the
// last gradients that fit in edge_bytes (at least one) form the last bucket.
std::vector<SimBucket> make_buckets(const std::vector<GradEvent>& grads, int64_t cap_bytes, int64_t edge_bytes = 0);
// The Reducer's timed buckets (dist/timed_layout.h) instead: cut from the gradients' arrival times
// with this link's ring all-reduce as the link the Reducer measured (its per-message cost as the
// per-bucket cost), then the cap and edge rules as dist::BucketPlan (padding to 256 bytes counts
// toward the cap there; the buckets' bytes here are the gradients' own).
std::vector<SimBucket> make_timed_buckets(const std::vector<GradEvent>& grads, int64_t cap_bytes, int64_t edge_bytes,
                                          const Link& link, int world_size);

struct Prediction {
  double step_us = 0;      // pre + max(backward, last collective's end) + post
  double comm_us = 0;      // sum of the collectives
  double exposed_us = 0;   // communication after backward ended
  double overlap_efficiency = 1;  // share of comm_us hidden behind backward; 1 with no comm
  std::vector<SimBucket> buckets;
};

// Schedules the buckets of `profile` (cap and edge cap in bytes, as make_buckets) over world_size
// ranks; timed: with overlap on, make_timed_buckets' layout (the Reducer cuts by time only then).
Prediction simulate(const Profile& profile, int64_t cap_bytes, int world_size, const Link& link, bool overlap,
                    int64_t edge_bytes = 0, bool timed = false);

// Weak scaling (fixed per-rank batch): single-rank step time / N-rank step time.
double scaling_efficiency(const Profile& profile, int64_t cap_bytes, int world_size, const Network& net,
                          bool overlap);

// The cap among candidates with the smallest predicted step (the first on ties).
int64_t best_bucket_bytes(const Profile& profile, const std::vector<int64_t>& candidates, int world_size,
                          const Link& link, bool overlap);

// One measured all-reduce: its size, rank count and duration.
struct CollectiveSample {
  int64_t bytes = 0;
  int world_size = 2;
  double us = 0;
};

// Least-squares fit of the ring model (alpha and bandwidth) to measured collectives:
// us = alpha * 2(n-1) + (1/bandwidth) * 2(n-1)/n * bytes. Needs two independent samples.
Link fit_link(const std::vector<CollectiveSample>& samples);

// Median of measured times (0 when empty): on a shared machine single steps stall on other
// processes, and a mean follows them.
double median(std::vector<double> values);

}  // namespace kestrel::bench::overlap
