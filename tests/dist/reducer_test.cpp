// The Reducer on in-process ranks (tests/dist/fake_group.h): bucket layout, in-order launching,
// averaging, overlap, accumulation, unused parameters, re-layout, misuse.
//
// The model is a chain of elementwise products, loss = sum(x * w_0 * w_1 * ... * w_{k-1}), whose
// gradients are known in closed form: dL/dw_j = x * prod_{i != j} w_i. Backward reaches w_{k-1}
// first and w_0 last, so the reverse registration order is also the arrival order unless a test
// multiplies in another order on purpose.
#include "dist/reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "dist/reducer_state.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/dist/fake_group.h"
#include "tests/support/testing.h"

namespace kestrel::dist {
namespace {

using testing::FakeGroup;
using testing::run_ranks;

constexpr int64_t kN = 16;  // elements per parameter: 128 bytes in float64

struct Chain {
  std::vector<Tensor> w;
  NamedTensors named;
};

// Identical parameters on every rank (same seed), as after the initial broadcast.
Chain make_chain(int k) {
  Chain c;
  for (int i = 0; i < k; ++i) {
    Tensor w = kestrel::testing::random_tensor({kN}, 100 + i, DType::F64, 0.5, 1.5);
    w.set_requires_grad(true);
    c.w.push_back(w);
    std::string name = "w";
    name += std::to_string(i);  // (GCC 12 warns falsely about "w" + to_string)
    c.named.push_back({name, w});
  }
  return c;
}

Tensor rank_input(int rank, int micro = 0) {
  return kestrel::testing::random_tensor({kN}, 7 + 31 * rank + 1000 * micro, DType::F64);
}

// sum(x * w_order[0] * w_order[1] * ...); backward reaches the last factor first.
Tensor chain_loss(const Chain& c, const Tensor& x, const std::vector<int>& order) {
  Tensor y = x;
  for (int i : order) y = ops::mul(y, c.w[i]);
  return ops::sum_all(y);
}

// One synchronised step: zeroed gradients, backward of this rank's loss, finalize.
void synced_step(Reducer& reducer, const Chain& c, int rank, const std::vector<int>& order) {
  reducer.zero_grad();
  reducer.prepare_for_backward();
  chain_loss(c, rank_input(rank), order).backward();
  reducer.finalize();
}

std::vector<int> forward_order(int k) {
  std::vector<int> o(k);
  for (int i = 0; i < k; ++i) o[i] = i;
  return o;
}

// dL/dw_j for one input, in double, independent of autograd.
std::vector<double> expected_grad(const Chain& c, const Tensor& x, int j) {
  std::vector<double> g = x.to_double_vector();
  for (size_t i = 0; i < c.w.size(); ++i)
    if (static_cast<int>(i) != j) {
      const std::vector<double> w = c.w[i].to_double_vector();
      for (int64_t e = 0; e < kN; ++e) g[e] *= w[e];
    }
  return g;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

// The average over ranks of dL/dw_j, summed over `micro` micro-batches per rank.
std::vector<double> averaged_grad(const Chain& c, int ranks, int j, int micro = 1) {
  std::vector<double> sum(kN, 0.0);
  for (int r = 0; r < ranks; ++r)
    for (int m = 0; m < micro; ++m) {
      const std::vector<double> g = expected_grad(c, rank_input(r, m), j);
      for (int64_t e = 0; e < kN; ++e) sum[e] += g[e] / ranks;
    }
  return sum;
}

ReducerOptions one_param_per_bucket() {
  ReducerOptions o;
  o.bucket_cap_mb = 200.0 / (1024.0 * 1024.0);  // 200 bytes: one 128-byte parameter per bucket
  return o;
}

TEST(BucketPlanTest, PacksGroupsInOrderAlignedAndCutsAtTheCap) {
  // Parameters 0..4; 1 and 3 are float64 (a second dtype group); 4 is the largest.
  const std::vector<ParamInfo> params = {{10, 4, 0}, {6, 8, 1}, {10, 4, 0}, {6, 8, 1}, {40, 4, 0}};
  const BucketPlan plan = BucketPlan::build(params, {4, 3, 2, 1, 0}, 512);
  ASSERT_EQ(plan.buckets.size(), 3u);
  // Group 0 (64 float32 elements per 256 bytes): param 4 at 0, param 2 at the next boundary, 64
  // (the bucket now spans 74 elements, 296 bytes); param 0 at 128 would make it span 552 bytes,
  // over the cap: it opens bucket 2 there. Group 1 (32 float64 elements per 256 bytes): params 3
  // and 1 at 0 and 32, one bucket of 38 elements.
  EXPECT_EQ(plan.buckets[0].params, std::vector<int>({4, 2}));
  EXPECT_EQ(plan.buckets[1].params, std::vector<int>({3, 1}));
  EXPECT_EQ(plan.buckets[2].params, std::vector<int>({0}));
  EXPECT_EQ(plan.buckets[1].group, 1);
  EXPECT_EQ(plan.slots[4].offset, 0);
  EXPECT_EQ(plan.slots[2].offset, 64);
  EXPECT_EQ(plan.slots[0].offset, 128);
  EXPECT_EQ(plan.slots[3].offset, 0);
  EXPECT_EQ(plan.slots[1].offset, 32);
  EXPECT_EQ(plan.buckets[0].numel, 74);
  EXPECT_EQ(plan.buckets[0].bytes, 296);
  EXPECT_EQ(plan.buckets[1].numel, 38);
  EXPECT_EQ(plan.buckets[2].offset, 128);
  EXPECT_EQ(plan.buckets[2].numel, 10);
  EXPECT_EQ(plan.group_numel, std::vector<int64_t>({138, 38}));
  // A parameter larger than the cap gets a bucket of its own.
  const BucketPlan tight = BucketPlan::build(params, {4, 3, 2, 1, 0}, 96);
  EXPECT_EQ(tight.buckets.size(), 5u);
  EXPECT_THROW(BucketPlan::build(params, {0, 1, 2, 3, 3}, 96), Error);
  EXPECT_THROW(BucketPlan::build(params, {0, 1, 2, 3, 4}, 0), Error);
  EXPECT_THROW(BucketPlan::build({{4, 3, 0}}, {0}, 96), Error);  // 3-byte elements
}

TEST(BucketPlanTest, EdgeBucketsKeepTheFirstAndTheLastBucketSmall) {
  // Eight float32 parameters of 256 bytes (no padding), laid out 0..7: cap 1024 bytes holds four,
  // the edge cap 512 two.
  const std::vector<ParamInfo> eight(8, ParamInfo{64, 4, 0});
  const std::vector<int> order{0, 1, 2, 3, 4, 5, 6, 7};
  auto layout = [](const BucketPlan& plan) {
    std::vector<std::vector<int>> out;
    for (const Bucket& b : plan.buckets) out.push_back(b.params);
    return out;
  };
  using L = std::vector<std::vector<int>>;
  EXPECT_EQ(layout(BucketPlan::build(eight, order, 1024)), L({{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout(BucketPlan::build(eight, order, 1024, 512)), L({{0, 1}, {2, 3, 4, 5}, {6, 7}}));
  // An edge cap at or above the cap changes nothing.
  EXPECT_EQ(layout(BucketPlan::build(eight, order, 1024, 1024)), L({{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout(BucketPlan::build(eight, order, 1024, 4096)), L({{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // A last parameter larger than the edge cap is the last bucket alone.
  std::vector<ParamInfo> big_last = eight;
  big_last.push_back({300, 4, 0});
  std::vector<int> order9 = order;
  order9.push_back(8);
  EXPECT_EQ(layout(BucketPlan::build(big_last, order9, 1024, 512)),
            L({{0, 1}, {2, 3, 4, 5}, {6, 7}, {8}}));
  // Everything within the edge cap: one bucket.
  EXPECT_EQ(layout(BucketPlan::build({{64, 4, 0}, {64, 4, 0}}, {1, 0}, 1024, 512)), L({{1, 0}}));
  // Per dtype group: each group has its own first and last bucket.
  std::vector<ParamInfo> two_groups = eight;
  for (int i = 0; i < 4; ++i) two_groups.push_back({32, 8, 1});  // float64, 256 bytes each
  std::vector<int> order12 = order;
  for (int i = 8; i < 12; ++i) order12.push_back(i);
  EXPECT_EQ(layout(BucketPlan::build(two_groups, order12, 1024, 512)),
            L({{0, 1}, {2, 3, 4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  EXPECT_THROW(BucketPlan::build(eight, order, 1024, -1), Error);
}

// Any sizes, dtypes and order: every parameter and bucket starts on a 256-byte boundary,
// parameters never overlap and sit inside their bucket, buckets of a group follow each other, and
// a bucket spans at most the cap unless it holds a single parameter.
TEST(BucketPlanTest, EveryParameterAndBucketIsAligned) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<ParamInfo> params;
    for (int p = 0; p < n; ++p) {
      const int64_t sizes[] = {2, 4, 8};
      const int group = static_cast<int>(rng() % 3);  // one dtype per group
      params.push_back({static_cast<int64_t>(rng() % 700), sizes[group], group});
    }
    std::vector<int> order(n);
    for (int p = 0; p < n; ++p) order[p] = p;
    std::shuffle(order.begin(), order.end(), rng);
    const int64_t cap = 256 + static_cast<int64_t>(rng() % 4096);
    const BucketPlan plan = BucketPlan::build(params, order, cap);
    std::vector<int64_t> group_end(3, 0);
    int64_t previous_bucket_end[3] = {0, 0, 0};
    for (const Bucket& b : plan.buckets) {
      const int64_t es = params[b.params.front()].element_size;
      EXPECT_EQ(b.offset * es % kGradAlignBytes, 0);
      EXPECT_GE(b.offset, previous_bucket_end[b.group]);
      previous_bucket_end[b.group] = b.offset + b.numel;
      EXPECT_EQ(b.bytes, b.numel * es);
      if (b.params.size() > 1) {
        EXPECT_LE(b.bytes, cap);
      }
      int64_t end = b.offset;
      for (int p : b.params) {
        const ParamSlot& s = plan.slots[p];
        EXPECT_EQ(s.offset * es % kGradAlignBytes, 0) << "parameter " << p;
        EXPECT_GE(s.offset, end) << "parameter " << p << " overlaps its predecessor";
        end = s.offset + params[p].numel;
        EXPECT_EQ(params[p].group, b.group);
      }
      EXPECT_EQ(end, b.offset + b.numel);
      group_end[b.group] = std::max(group_end[b.group], end);
    }
    for (int g = 0; g < static_cast<int>(plan.group_numel.size()); ++g)
      EXPECT_EQ(plan.group_numel[g], group_end[g]);
  }
}

TEST(ReadyTrackerTest, LaunchesBucketsStrictlyInIndexOrder) {
  const std::vector<ParamInfo> params(4, ParamInfo{4, 4, 0});
  // 256-byte slots: [0, 1] spans 272 bytes; 2 would make it 528 > 512.
  const BucketPlan plan = BucketPlan::build(params, {0, 1, 2, 3}, 512);  // [0,1] [2,3]
  ASSERT_EQ(plan.buckets.size(), 2u);
  ReadyTracker t(&plan);
  EXPECT_TRUE(t.mark_ready(3).empty());
  EXPECT_TRUE(t.mark_ready(2).empty());  // bucket 1 complete, but bucket 0 goes first
  EXPECT_TRUE(t.bucket_ready(1));
  EXPECT_TRUE(t.mark_ready(0).empty());
  EXPECT_EQ(t.mark_ready(1), std::vector<int>({0, 1}));
  EXPECT_TRUE(t.all_launched());
  EXPECT_THROW(t.mark_ready(1), Error);
  EXPECT_EQ(t.arrivals(), std::vector<int>({3, 2, 0, 1}));
  t.reset();
  EXPECT_EQ(t.unready_params(), std::vector<int>({0, 1, 2, 3}));
}

TEST(ReducerTest, AveragesGradientsInPlaceInsideOneFlatBuffer) {
  constexpr int kRanks = 3, kParams = 5;
  run_ranks(kRanks, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(kParams);
    Reducer reducer(c.named, group, one_param_per_bucket());
    EXPECT_EQ(reducer.bucket_layout().size(), static_cast<size_t>(kParams));
    for (int step = 0; step < 2; ++step) {
      reducer.zero_grad();
      reducer.prepare_for_backward();
      chain_loss(c, rank_input(group->rank()), forward_order(kParams)).backward();
      reducer.finalize();
      for (int j = 0; j < kParams; ++j) {
        SCOPED_TRACE("w" + std::to_string(j) + " step " + std::to_string(step));
        expect_near(c.w[j].grad().to_double_vector(), averaged_grad(c, kRanks, j));
        // AccumulateGrad added into the reducer's view: one storage holds every gradient, each
        // on a 256-byte boundary in memory.
        EXPECT_EQ(c.w[j].grad().storage(), c.w[0].grad().storage());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(c.w[j].grad().data_ptr()) % kGradAlignBytes, 0u);
      }
    }
    EXPECT_EQ(group->all_reduces, 2 * kParams);
    EXPECT_TRUE(reducer.unused_parameters().empty());
  });
}

TEST(ReducerTest, OverlapLaunchesBucketsBeforeBackwardEndsAndNoOverlapAfter) {
  constexpr int kRanks = 2, kParams = 6;
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    run_ranks(kRanks, [&](std::shared_ptr<FakeGroup> group) {
      Chain c = make_chain(kParams);
      ReducerOptions options = one_param_per_bucket();
      options.overlap = overlap;
      Reducer reducer(c.named, group, options);
      reducer.prepare_for_backward();
      chain_loss(c, rank_input(group->rank()), forward_order(kParams)).backward();
      reducer.finalize();
      const StepTimeline& t = reducer.last_timeline();
      ASSERT_EQ(t.buckets.size(), static_cast<size_t>(kParams));
      for (const BucketTiming& b : t.buckets) {
        EXPECT_GE(b.ready_us, t.backward_start_us);
        EXPECT_GE(b.launch_us, b.ready_us);
        EXPECT_GE(b.done_us, b.launch_us);
        EXPECT_LE(b.done_us, t.finalize_end_us);
      }
      if (overlap) {
        // Every bucket but the last is launched while backward still has parameters to reach.
        for (int b = 0; b + 1 < kParams; ++b) EXPECT_LT(t.buckets[b].launch_us, t.backward_end_us);
        EXPECT_GT(overlap_efficiency(t), 0.0);
      } else {
        for (const BucketTiming& b : t.buckets) EXPECT_GE(b.launch_us, t.backward_end_us);
        EXPECT_EQ(overlap_efficiency(t), 0.0);
      }
      for (int j = 0; j < kParams; ++j)
        expect_near(c.w[j].grad().to_double_vector(), averaged_grad(c, kRanks, j));
    });
  }
}

TEST(ReducerTest, NoSyncAccumulatesLocallyAndTheSyncStepReducesTheSum) {
  constexpr int kRanks = 2, kParams = 3, kMicro = 3;
  run_ranks(kRanks, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(kParams);
    Reducer reducer(c.named, group, one_param_per_bucket());
    {
      NoSyncGuard no_sync(reducer);
      for (int m = 0; m + 1 < kMicro; ++m) {
        reducer.prepare_for_backward();  // no-ops while sync is off
        chain_loss(c, rank_input(group->rank(), m), forward_order(kParams)).backward();
        reducer.finalize();
      }
    }
    EXPECT_EQ(group->all_reduces, 0);
    reducer.prepare_for_backward();
    chain_loss(c, rank_input(group->rank(), kMicro - 1), forward_order(kParams)).backward();
    reducer.finalize();
    EXPECT_EQ(group->all_reduces, kParams);
    for (int j = 0; j < kParams; ++j)
      expect_near(c.w[j].grad().to_double_vector(), averaged_grad(c, kRanks, j, kMicro));
  });
}

TEST(ReducerTest, UnusedParametersAreReducedAtFinalizeInsteadOfHanging) {
  constexpr int kRanks = 2, kParams = 4;
  run_ranks(kRanks, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(kParams);
    Reducer reducer(c.named, group, one_param_per_bucket());
    reducer.prepare_for_backward();
    // w1 takes no part in this forward.
    chain_loss(c, rank_input(group->rank()), {0, 2, 3}).backward();
    reducer.finalize();
    EXPECT_EQ(reducer.unused_parameters(), std::vector<std::string>({"w1"}));
    expect_near(c.w[1].grad().to_double_vector(), std::vector<double>(kN, 0.0));
    // The used parameters' gradients are those of the three-factor chain.
    Chain used;
    for (int i : {0, 2, 3}) used.w.push_back(c.w[i]);
    for (int u = 0; u < 3; ++u)
      expect_near(c.w[u == 0 ? 0 : u + 1].grad().to_double_vector(),
                  averaged_grad(used, kRanks, u));
    EXPECT_EQ(group->all_reduces, kParams);
  });
}

TEST(ReducerTest, RelaysOutBucketsOnceInTheObservedArrivalOrder) {
  constexpr int kRanks = 2, kParams = 4;
  run_ranks(kRanks, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(kParams);
    Reducer reducer(c.named, group, one_param_per_bucket());
    using Layout = std::vector<std::vector<std::string>>;
    EXPECT_EQ(reducer.bucket_layout(), Layout({{"w3"}, {"w2"}, {"w1"}, {"w0"}}));
    // Multiplying in reverse makes backward reach w0 first.
    const std::vector<int> order = {3, 2, 1, 0};
    for (int step = 0; step < 3; ++step) {
      synced_step(reducer, c, group->rank(), order);
      // (The timed cuts after step 2 cannot change it: one parameter per bucket is the cap's.)
      EXPECT_EQ(reducer.bucket_layout(), Layout({{"w0"}, {"w1"}, {"w2"}, {"w3"}}));
      // Gradients survive the move into the new layout, and the next step fills it correctly.
      for (int j = 0; j < kParams; ++j)
        expect_near(c.w[j].grad().to_double_vector(), averaged_grad(c, kRanks, j));
    }
    // The later steps launched bucket 0 (w0, first to arrive) before backward ended.
    const StepTimeline& t = reducer.last_timeline();
    EXPECT_LT(t.buckets[0].launch_us, t.backward_end_us);
    EXPECT_EQ(group->broadcasts, 1);  // rank 0's order after step 1 (timed buckets are opt-in)
  });
}

// A checkpoint's settled layout (Reducer::settled_layout) adopted by a fresh Reducer: its buckets
// are rank 0's, with the saved cuts, and no later step lays them out again (no arrival-order
// re-layout, no timing step), so a resumed run reduces in the uninterrupted run's buckets.
TEST(ReducerTest, AdoptsASettledLayoutAndKeepsIt) {
  constexpr int kRanks = 2, kParams = 4;
  run_ranks(kRanks, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(kParams);
    ReducerOptions options;
    options.bucket_cap_mb = 1000.0 / (1024.0 * 1024.0);  // all four 128-byte parameters fit
    options.edge_bucket_cap_mb = 0;
    options.timed_buckets = true;
    Reducer reducer(c.named, group, options);
    EXPECT_FALSE(reducer.settled_layout());  // not settled before the first step
    Reducer::SettledLayout saved;
    saved.order = {"w0", "w1", "w2", "w3"};
    saved.cuts = {false, false, true, false};  // a bucket begins at w2
    saved.bucket_cap_mb = options.bucket_cap_mb;
    saved.edge_bucket_cap_mb = 0;
    if (group->rank() == 1) saved.order = {"w3", "w2", "w1", "w0"};  // rank 0's copy wins
    ASSERT_TRUE(reducer.adopt_layout(saved));
    using Layout = std::vector<std::vector<std::string>>;
    const Layout want = {{"w0", "w1"}, {"w2", "w3"}};
    EXPECT_EQ(reducer.bucket_layout(), want);
    const std::vector<int> order = {3, 2, 1, 0};
    for (int step = 0; step < 3; ++step) {
      synced_step(reducer, c, group->rank(), order);
      EXPECT_EQ(reducer.bucket_layout(), want) << "step " << step;
      for (int j = 0; j < kParams; ++j)
        expect_near(c.w[j].grad().to_double_vector(), averaged_grad(c, kRanks, j));
    }
    EXPECT_EQ(group->broadcasts, 1);  // the adopted layout's, and nothing after
    const std::optional<Reducer::SettledLayout> settled = reducer.settled_layout();
    ASSERT_TRUE(settled);
    EXPECT_EQ(settled->order, std::vector<std::string>({"w0", "w1", "w2", "w3"}));
    EXPECT_EQ(settled->cuts, saved.cuts);
  });
}

// A layout made under another cap is not adopted (the run lays out as usual); one naming
// parameters the model lacks is refused.
TEST(ReducerTest, RefusesALayoutOfOtherOptionsOrAnotherModel) {
  run_ranks(1, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(3);
    {
      Reducer reducer(c.named, group, one_param_per_bucket());
      Reducer::SettledLayout other_cap{{"w0", "w1", "w2"}, {}, 4.0, kDefaultEdgeBucketCapMb};
      EXPECT_FALSE(reducer.adopt_layout(other_cap));
      EXPECT_FALSE(reducer.settled_layout());  // still to be laid out from arrivals
    }
    Reducer reducer(c.named, group, one_param_per_bucket());
    const ReducerOptions o = one_param_per_bucket();
    Reducer::SettledLayout stranger{{"w0", "conv.weight", "w2"}, {}, o.bucket_cap_mb, o.edge_bucket_cap_mb};
    try {
      reducer.adopt_layout(stranger);
      ADD_FAILURE() << "a layout naming conv.weight was adopted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'conv.weight', which this model has no parameter of"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ReducerTest, RestoresTheViewWhenAnOptimizerResetGrad) {
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(2);
    Reducer reducer(c.named, group);
    c.w[0].set_grad(Tensor());  // "set_to_none": AccumulateGrad will allocate a fresh tensor
    reducer.prepare_for_backward();
    chain_loss(c, rank_input(group->rank()), forward_order(2)).backward();
    reducer.finalize();
    EXPECT_EQ(c.w[0].grad().storage(), c.w[1].grad().storage());
    expect_near(c.w[0].grad().to_double_vector(), averaged_grad(c, 2, 0));
  });
}

TEST(ReducerTest, RefusesMisuseWithClearErrors) {
  run_ranks(1, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(2);
    Reducer reducer(c.named, group);
    // Backward without prepare_for_backward(): the hook refuses.
    EXPECT_THROW(chain_loss(c, rank_input(0), forward_order(2)).backward(), Error);
    reducer.prepare_for_backward();
    EXPECT_THROW(reducer.prepare_for_backward(), Error);
    EXPECT_THROW(reducer.zero_grad(), Error);
    chain_loss(c, rank_input(0), forward_order(2)).backward();
    // A second backward in the same step would race the launched buckets.
    EXPECT_THROW(chain_loss(c, rank_input(0), forward_order(2)).backward(), Error);
    reducer.finalize();
    EXPECT_THROW(reducer.finalize(), Error);
    Tensor frozen = Tensor::zeros({3});
    EXPECT_THROW(Reducer({{"frozen", frozen}}, group), Error);
    ReducerOptions bad;
    bad.bucket_cap_mb = 0;
    EXPECT_THROW(Reducer(c.named, group, bad), Error);
  });
}

// A backward begun on the host that never ran (a CUDA graph capture that failed) is undone by
// restoring the snapshot taken before it: the next synchronised step arms and reduces as usual.
TEST(ReducerTest, ARestoredSnapshotForgetsABegunBackward) {
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(2);
    Reducer reducer(c.named, group);
    // A first step lays the buckets out anew from its arrival order; snapshots come after it.
    reducer.prepare_for_backward();
    chain_loss(c, rank_input(group->rank()), forward_order(2)).backward();
    reducer.finalize();
    reducer.zero_grad();
    const Reducer::Snapshot before = reducer.snapshot();
    reducer.set_sync(false);
    reducer.set_sync(true);
    reducer.prepare_for_backward();
    EXPECT_THROW(reducer.zero_grad(), Error);  // inside a synchronised step
    reducer.restore(before);
    EXPECT_NO_THROW(reducer.zero_grad());  // no longer inside a synchronised step
    reducer.prepare_for_backward();
    chain_loss(c, rank_input(group->rank()), forward_order(2)).backward();
    reducer.finalize();
    expect_near(c.w[0].grad().to_double_vector(), averaged_grad(c, 2, 0));
  });
}

// A snapshot from before the first step's re-layout cannot be put back: the buckets it knew of
// are gone.
TEST(ReducerTest, ASnapshotFromBeforeTheRelayoutIsRefused) {
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    Chain c = make_chain(2);
    Reducer reducer(c.named, group);
    const Reducer::Snapshot before = reducer.snapshot();
    reducer.prepare_for_backward();
    chain_loss(c, rank_input(group->rank()), forward_order(2)).backward();
    reducer.finalize();
    EXPECT_THROW(reducer.restore(before), Error);
  });
}

}  // namespace
}  // namespace kestrel::dist
