#include "bench/overlap/simulator.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "dist/reducer_state.h"
#include "dist/timed_layout.h"

namespace kestrel::bench::overlap {

Link Network::link_for(int world_size) const {
  if (world_size <= gpus_per_node) return intra;
  // A ring spanning nodes moves every chunk through inter-node hops too: each step waits for the
  // slowest hop, so the whole ring runs at the worse bandwidth and latency.
  return {std::max(intra.alpha_us, inter.alpha_us), std::min(intra.bytes_per_us, inter.bytes_per_us)};
}

double ring_allreduce_us(int64_t bytes, int world_size, const Link& link) {
  KESTREL_CHECK(world_size >= 1, "ring_allreduce_us: world size must be >= 1, got ", world_size);
  KESTREL_CHECK(link.bytes_per_us > 0, "ring_allreduce_us: bandwidth must be > 0, got ", link.bytes_per_us);
  if (world_size == 1) return 0;
  const double n = world_size;
  return 2.0 * (n - 1) / n * static_cast<double>(bytes) / link.bytes_per_us + 2.0 * (n - 1) * link.alpha_us +
         allreduce_round_trips(world_size) * 2.0 * link.delay_us;
}

int allreduce_round_trips(int world_size) { return world_size <= 1 ? 0 : world_size == 2 ? 1 : 2 * (world_size - 1); }

std::vector<SimBucket> make_buckets(const std::vector<GradEvent>& grads, int64_t cap_bytes, int64_t edge_bytes) {
  KESTREL_CHECK(cap_bytes > 0, "make_buckets: the bucket cap must be > 0 bytes, got ", cap_bytes);
  KESTREL_CHECK(edge_bytes >= 0, "make_buckets: the edge bucket cap must be >= 0 bytes, got ", edge_bytes);
  const int64_t edge = edge_bytes > 0 ? std::min(edge_bytes, cap_bytes) : cap_bytes;
  // The last gradients, as many as fit in the edge cap (at least one), form the last bucket.
  size_t tail = grads.size();
  if (edge < cap_bytes) {
    int64_t bytes = 0;
    while (tail > 0 && (tail == grads.size() || bytes + grads[tail - 1].bytes <= edge)) bytes += grads[--tail].bytes;
  }
  std::vector<SimBucket> out;
  for (size_t i = 0; i < grads.size(); ++i) {
    const GradEvent& g = grads[i];
    // As dist::BucketPlan::build: a gradient that would take the open bucket past its cap (the
    // edge cap for the first bucket) opens a new one (one larger than the cap gets a bucket of its
    // own), and so does the first gradient of the tail.
    const bool first_open = out.size() == 1;
    if (out.empty() || i == tail || out.back().bytes + g.bytes > (first_open ? edge : cap_bytes))
      out.push_back(SimBucket{0, g.ready_us, 0, 0});
    SimBucket& open = out.back();
    open.bytes += g.bytes;
    open.ready_us = std::max(open.ready_us, g.ready_us);
  }
  return out;
}

std::vector<SimBucket> make_timed_buckets(const std::vector<GradEvent>& grads, int64_t cap_bytes, int64_t edge_bytes,
                                          const Link& link, int world_size) {
  KESTREL_CHECK(world_size >= 2, "make_timed_buckets: needs 2 or more ranks, got ", world_size);
  std::vector<dist::ParamInfo> params;
  std::vector<int> order;
  std::vector<double> arrival;
  for (const GradEvent& g : grads) {
    order.push_back(static_cast<int>(params.size()));
    params.push_back({(g.bytes + 3) / 4, 4, 0});  // float32 gradients
    arrival.push_back(g.ready_us);
  }
  const double n = world_size;
  const dist::LinkEstimate measured{2.0 * (n - 1) / n / link.bytes_per_us, 2.0 * (n - 1) * link.alpha_us};
  const dist::BucketPlan plan = dist::BucketPlan::build(
      params, order, cap_bytes, edge_bytes, dist::timed_cuts(params, order, arrival, measured, cap_bytes));
  std::vector<SimBucket> out;
  for (const dist::Bucket& b : plan.buckets) {
    SimBucket s;
    for (int p : b.params) {
      s.bytes += grads[p].bytes;
      s.ready_us = std::max(s.ready_us, grads[p].ready_us);
    }
    out.push_back(s);
  }
  return out;
}

Prediction simulate(const Profile& profile, int64_t cap_bytes, int world_size, const Link& link, bool overlap,
                    int64_t edge_bytes, bool timed) {
  Prediction p;
  p.buckets = timed && overlap && world_size > 1
                  ? make_timed_buckets(profile.grads, cap_bytes, edge_bytes, link, world_size)
                  : make_buckets(profile.grads, cap_bytes, edge_bytes);
  double channel_free = 0, launched_ready = 0;
  for (SimBucket& b : p.buckets) {
    // Buckets launch in order: a bucket that is ready early still waits for its predecessors.
    launched_ready = std::max(launched_ready, b.ready_us);
    const double launch = overlap ? launched_ready : std::max(profile.backward_us, launched_ready);
    b.start_us = std::max(launch, channel_free);
    b.end_us = b.start_us + ring_allreduce_us(b.bytes, world_size, link);
    channel_free = b.end_us;
    p.comm_us += b.end_us - b.start_us;
  }
  const double end = std::max(profile.backward_us, channel_free);
  p.exposed_us = end - profile.backward_us;
  p.overlap_efficiency = p.comm_us > 0 ? std::clamp(1.0 - p.exposed_us / p.comm_us, 0.0, 1.0) : 1.0;
  p.step_us = profile.pre_us + end + profile.post_us;
  return p;
}

double scaling_efficiency(const Profile& profile, int64_t cap_bytes, int world_size, const Network& net,
                          bool overlap) {
  const double single = profile.pre_us + profile.backward_us + profile.post_us;
  return single / simulate(profile, cap_bytes, world_size, net.link_for(world_size), overlap).step_us;
}

int64_t best_bucket_bytes(const Profile& profile, const std::vector<int64_t>& candidates, int world_size,
                          const Link& link, bool overlap) {
  KESTREL_CHECK(!candidates.empty(), "best_bucket_bytes: give at least one candidate bucket size");
  int64_t best = candidates.front();
  double best_us = simulate(profile, best, world_size, link, overlap).step_us;
  for (int64_t c : candidates) {
    const double us = simulate(profile, c, world_size, link, overlap).step_us;
    if (us < best_us) {
      best_us = us;
      best = c;
    }
  }
  return best;
}

Link fit_link(const std::vector<CollectiveSample>& samples) {
  // Regressors: a = 2(n-1) multiplies alpha, b = 2(n-1)/n * bytes multiplies 1/bandwidth.
  double saa = 0, sab = 0, sbb = 0, say = 0, sby = 0;
  for (const CollectiveSample& s : samples) {
    KESTREL_CHECK(s.world_size >= 2, "fit_link: a collective sample needs >= 2 ranks, got ", s.world_size);
    const double n = s.world_size, a = 2 * (n - 1), b = 2 * (n - 1) / n * static_cast<double>(s.bytes);
    saa += a * a;
    sab += a * b;
    sbb += b * b;
    say += a * s.us;
    sby += b * s.us;
  }
  const double det = saa * sbb - sab * sab;
  KESTREL_CHECK(samples.size() >= 2 && det > 1e-12 * saa * sbb, "fit_link: ", samples.size(),
                " samples do not determine latency and bandwidth; measure collectives of at least two sizes");
  double alpha = (sbb * say - sab * sby) / det, inv_bw = (saa * sby - sab * say) / det;
  if (alpha < 0) {  // noise can push the intercept below zero: refit through the origin
    alpha = 0;
    inv_bw = sby / sbb;
  }
  KESTREL_CHECK(inv_bw > 0, "fit_link: the measured times do not grow with size (fitted 1/bandwidth ", inv_bw,
                "); measure larger buckets");
  return {alpha, 1.0 / inv_bw, 0};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace kestrel::bench::overlap
