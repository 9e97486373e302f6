// The timed bucket layout (dist/timed_layout.h): the link estimate from a step's timeline, and the
// cuts: deterministic, never above the cap, one group at a time, unused parameters included, and
// never worse in the link model than the cap's own layout beyond the tolerance traded for fewer
// buckets (the dynamic programme is exact).
#include "dist/timed_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "base/error.h"

namespace kestrel::dist {
namespace {

// When the last bucket's all-reduce ends in timed_cuts' model (one link, buckets in index order,
// each from its last gradient's arrival or the link's previous finish, the rate with headroom).
double model_finish(const BucketPlan& plan, const std::vector<double>& arrival,
                    const LinkEstimate& link) {
  double free_at = 0;
  for (const Bucket& b : plan.buckets) {
    double ready = 0;
    for (int p : b.params) ready = std::max(ready, arrival[p]);
    free_at = std::max(ready, free_at) + std::max(link.per_bucket_us, kMinBucketUs) +
              static_cast<double>(b.bytes) * link.us_per_byte * kLinkHeadroom;
  }
  return free_at;
}

// How far from the earliest finish timed_cuts may stay to save buckets.
double tolerance(const std::vector<double>& arrival, const LinkEstimate& link) {
  return std::max(std::max(link.per_bucket_us, kMinBucketUs),
                  kFinishTolerance * *std::max_element(arrival.begin(), arrival.end()));
}

struct Case {
  std::vector<ParamInfo> params;
  std::vector<int> order;
  std::vector<double> arrival;  // per parameter, increasing along `order`
};

// n float32 parameters of random size (1 to 20000 elements), arriving in `order` over 0..backward.
Case random_case(int n, uint32_t seed, double backward_us) {
  std::mt19937 rng(seed);
  Case c;
  for (int p = 0; p < n; ++p)
    c.params.push_back({static_cast<int64_t>(1 + rng() % 20000), 4, 0});
  for (int p = n - 1; p >= 0; --p) c.order.push_back(p);
  std::vector<double> at;
  for (int i = 0; i < n; ++i) at.push_back(std::uniform_real_distribution<double>(0, backward_us)(rng));
  std::sort(at.begin(), at.end());
  c.arrival.assign(n, 0);
  for (int i = 0; i < n; ++i) c.arrival[c.order[i]] = at[i];
  return c;
}

TEST(LinkEstimateTest, RateFromTheBusyLinkAndPerBucketCostFromTheLaunchGaps) {
  StepTimeline t;
  // Bucket 0: 1000 bytes, busy 100..200. Bucket 1: 3000 bytes, launched at 150 while bucket 0 still
  // ran: busy from 200 to 500. Bucket 2: finish never seen: left out. Launch gaps 10 and 30.
  t.buckets = {{1000, 1, 90, 100, 200}, {3000, 1, 120, 150, 500}, {500, 1, 580, 600, -1}};
  const LinkEstimate link = estimate_link(t);
  EXPECT_DOUBLE_EQ(link.us_per_byte, 400.0 / 4000.0);
  EXPECT_DOUBLE_EQ(link.per_bucket_us, kMinBucketUs);  // the median gap, 20 us, is below the floor
  t.buckets = {{1000, 1, 0, 500, 900}, {1000, 1, 1000, 1700, 2000}};  // gaps 500 and 700
  EXPECT_DOUBLE_EQ(estimate_link(t).per_bucket_us, 600.0);
  // Nothing seen finished: no estimate, and then no cuts.
  t.buckets = {{1000, 1, 0, 10, -1}};
  EXPECT_FALSE(estimate_link(t).valid());
  const Case c = random_case(6, 1, 1000);
  const std::vector<bool> cuts = timed_cuts(c.params, c.order, c.arrival, LinkEstimate{}, 1 << 20);
  EXPECT_EQ(cuts, std::vector<bool>(6, false));
}

TEST(TimedCutsTest, SplitsTheLateLargeBucketThatTheCapLeavesWhole) {
  // 8 parameters of 64 KiB arriving every 1 ms of an 8 ms backward; the link moves 64 KiB in
  // 0.4 ms, planned as 0.8 ms (kLinkHeadroom). One bucket (the cap's layout) finishes at
  // 8 + 0.1 + 6.4 ms; cut by time, each piece is all-reduced while backward goes on and only the
  // last one is left after it (within the tolerance of the best: 0.1 ms).
  std::vector<ParamInfo> params(8, {16384, 4, 0});
  std::vector<int> order = {7, 6, 5, 4, 3, 2, 1, 0};
  std::vector<double> arrival(8);
  for (int i = 0; i < 8; ++i) arrival[order[i]] = 1000.0 * (i + 1);
  const LinkEstimate link{400.0 / 65536.0, 100.0};
  const int64_t cap = 25 << 20;
  const std::vector<bool> cuts = timed_cuts(params, order, arrival, link, cap);
  const BucketPlan timed = BucketPlan::build(params, order, cap, 0, cuts);
  const BucketPlan whole = BucketPlan::build(params, order, cap, 0);
  ASSERT_EQ(whole.buckets.size(), 1u);
  EXPECT_GT(timed.buckets.size(), 1u);
  EXPECT_NEAR(model_finish(whole, arrival, link), 8000 + 100 + 6400, 1e-6);
  EXPECT_LE(model_finish(timed, arrival, link), 8000 + 100 + 800 + tolerance(arrival, link) + 1e-6);
  // Where a bucket's fixed cost is longer than backward (10 ms), one bucket stays best.
  const LinkEstimate fast{1e-6, 10000.0};
  const BucketPlan one =
      BucketPlan::build(params, order, cap, 0, timed_cuts(params, order, arrival, fast, cap));
  EXPECT_EQ(one.buckets.size(), 1u);
}

TEST(TimedCutsTest, DeterministicWithinTheCapAndNeverWorseThanTheCapsLayout) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    const Case c = random_case(30, seed, 50000);
    const LinkEstimate link{0.01 + 0.001 * (seed % 7), 50.0 * (seed % 5)};
    for (int64_t cap : {int64_t{4096}, int64_t{100000}, int64_t{1} << 30}) {
      const std::vector<bool> cuts = timed_cuts(c.params, c.order, c.arrival, link, cap);
      // Same inputs, same cuts (what every rank would compute; the Reducer broadcasts rank 0's).
      EXPECT_EQ(cuts, timed_cuts(c.params, c.order, c.arrival, link, cap));
      const BucketPlan timed = BucketPlan::build(c.params, c.order, cap, 0, cuts);
      const BucketPlan by_bytes = BucketPlan::build(c.params, c.order, cap, 0);
      for (const Bucket& b : timed.buckets) EXPECT_TRUE(b.params.size() == 1 || b.bytes <= cap) << b.bytes;
      // The cuts are exactly the plan's bucket starts: BucketPlan::build adds none of its own.
      int starts = 0;
      for (bool cut : cuts) starts += cut;
      EXPECT_EQ(starts, static_cast<int>(timed.buckets.size()));
      EXPECT_LE(model_finish(timed, c.arrival, link),
                model_finish(by_bytes, c.arrival, link) + tolerance(c.arrival, link) + 1e-3);
    }
  }
}

TEST(TimedCutsTest, UnusedParametersAndSeveralGroups) {
  // Parameters 0..5; 1 and 4 are float64 (group 1). 5 got no gradient: the Reducer gives it the
  // backward's end as its arrival and puts it last in the order.
  const std::vector<ParamInfo> params = {{5000, 4, 0}, {3000, 8, 1}, {5000, 4, 0},
                                         {5000, 4, 0}, {3000, 8, 1}, {100, 4, 0}};
  const std::vector<int> order = {3, 4, 2, 1, 0, 5};
  const std::vector<double> arrival = {4000, 3000, 2000, 1000, 1500, 5000};
  const LinkEstimate link{0.05, 100};
  const std::vector<bool> cuts = timed_cuts(params, order, arrival, link, 1 << 30);
  ASSERT_EQ(cuts.size(), order.size());
  EXPECT_TRUE(cuts[0]);  // each group's first parameter begins a bucket
  EXPECT_TRUE(cuts[1]);
  const BucketPlan plan = BucketPlan::build(params, order, 1 << 30, 0, cuts);
  std::vector<int> seen(params.size(), 0);
  for (const Bucket& b : plan.buckets)
    for (int p : b.params) {
      ++seen[p];
      EXPECT_EQ(params[p].group, b.group);
    }
  EXPECT_EQ(seen, std::vector<int>(params.size(), 1));
  // Group 0's 20 KB take 1 ms on this link: cut by time it ends in more than one bucket.
  int group0 = 0;
  for (const Bucket& b : plan.buckets) group0 += b.group == 0;
  EXPECT_GT(group0, 1);
  EXPECT_THROW(timed_cuts(params, order, {1, 2}, link, 1 << 30), Error);
  EXPECT_THROW(BucketPlan::build(params, order, 1 << 30, 0, {true}), Error);
}

}  // namespace
}  // namespace kestrel::dist
