// The training step without host synchronisation (yolo/train/train_step), on the CPU with yolov5n:
//   - a batch with a non-finite loss skips its window's optimizer step and EMA update on the
//     device, step counts included (Adam's and the EMA's counts live on the device), so the run
//     continues exactly as if the batch had never come (parameters, optimizer state with its
//     counts, EMA weights and count: bitwise), also when the non-finite batch sits inside an
//     accumulation window;
//   - under HostSyncGuard, forward/backward and the optimizer step issue no blocking host read,
//     and the one read per batch is the previous batch's status, already there when read: in one
//     process, and in a 2-process Gloo job (DDP with buffer broadcast and bucketed all-reduce),
//     where a stop request and a non-finite loss on rank 1 reach both ranks at the same batch.
// On the CPU every call is synchronous; the guard counts the calls that would wait on CUDA
// (engine/host_sync.h).
#include "yolo/train/train_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dist/env.h"
#include "engine/autograd.h"
#include "engine/host_sync.h"
#include "engine/ops/elementwise.h"
#include "tests/dist/spawn.h"
#include "tests/support/testing.h"
#include "tests/yolo/train/train_step_rig.h"

namespace kestrel::yolo {
namespace {

using testing::input;
using testing::expect_same_state;
using testing::Rig;
using testing::targets;

struct Batch {
  uint64_t seed;
  bool nonfinite;
  bool step_now;
};

// The trainer's per-batch sequence; returns every batch's status.
std::vector<BatchStatus> run(Rig& rig, const std::vector<Batch>& batches) {
  std::vector<BatchStatus> seen;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    rig.step->run(input(b.seed, b.nonfinite), targets(), static_cast<int64_t>(i), b.step_now,
                  false);
    for (const BatchStatus& s : rig.step->take_previous()) seen.push_back(s);
  }
  for (const BatchStatus& s : rig.step->drain()) seen.push_back(s);
  return seen;
}

class TrainStepSkip : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(TrainStepSkip, ANonFiniteBatchLeavesTheRunAsIfItNeverCame) {
  Rig with(GetParam(), RankInfo{}), without(GetParam(), RankInfo{});
  const std::vector<BatchStatus> s =
      run(with, {{1, false, true}, {2, true, true}, {3, false, true}});
  run(without, {{1, false, true}, {3, false, true}});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].nonfinite_ranks, 0);
  EXPECT_EQ(s[1].nonfinite_ranks, 1);
  EXPECT_EQ(s[2].nonfinite_ranks, 0);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(s[k].batch, k);
  EXPECT_GT(s[0].box + s[0].obj + s[0].cls, 0.0);
  EXPECT_TRUE(std::isnan(s[1].box + s[1].obj + s[1].cls));
  expect_same_state(with, without);
}

// A non-finite loss anywhere in an accumulation window skips the whole window: the finite batch
// before it in the window is dropped too, and the next window starts from zero gradients.
TEST_P(TrainStepSkip, ANonFiniteBatchSkipsItsWholeAccumulationWindow) {
  Rig with(GetParam(), RankInfo{}), without(GetParam(), RankInfo{});
  run(with, {{1, false, true}, {2, false, false}, {3, true, true}, {4, false, true}});
  run(without, {{1, false, true}, {4, false, true}});
  expect_same_state(with, without);
  EXPECT_FALSE(with.step->window_nonfinite());
}

INSTANTIATE_TEST_SUITE_P(SgdAndAdam, TrainStepSkip,
                         ::testing::Values(OptimizerKind::SGD, OptimizerKind::Adam));

// A window whose non-finite loss is known at a checkpoint is restored as such: its step is
// skipped after the resume too.
TEST(TrainStep, ARestoredNonFiniteWindowIsStillSkipped) {
  Rig rig(OptimizerKind::SGD, RankInfo{});
  run(rig, {{1, false, true}});
  const std::vector<Tensor> before = rig.optimizer->parameters();
  std::vector<Tensor> copies;
  for (const Tensor& p : before) copies.push_back(p.clone());
  rig.step->set_window_nonfinite(true);
  EXPECT_TRUE(rig.step->window_nonfinite());
  run(rig, {{5, false, true}});
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(kestrel::testing::all_close(before[i], copies[i], 0, 0)) << i;
  EXPECT_FALSE(rig.step->window_nonfinite());
}

// One process: the enqueueing parts read nothing back; the lagged status read is one read of a
// status that was already there.
TEST(TrainStep, OneProcessStepIssuesNoBlockingRead) {
  Rig rig(OptimizerKind::SGD, RankInfo{});
  for (int64_t i = 0; i < 4; ++i) {
    {
      HostSyncGuard none(HostSyncGuard::Policy::Throw);
      rig.step->forward_backward(input(10 + i, false), targets(), i, true, false);
    }
    EXPECT_TRUE(rig.step->previous_ready());
    {
      HostSyncGuard reads(HostSyncGuard::Policy::Count);
      const std::vector<BatchStatus> s = rig.step->take_previous();
      EXPECT_EQ(static_cast<int64_t>(s.size()), i == 0 ? 0 : 1);
      EXPECT_EQ(reads.count(), static_cast<int64_t>(s.size()));
    }
    HostSyncGuard none(HostSyncGuard::Policy::Throw);
    rig.step->optimizer_step();
  }
}

// --quad's loss x4: every gradient is exactly 4 times the plain step's (a power of two scales
// each rounding alike), while the logged losses are the batch's own.
TEST(TrainStep, LossFactorScalesTheGradientsNotTheLoggedLoss) {
  TrainStepOptions quad;
  quad.loss_factor = 4.0;
  Rig plain(OptimizerKind::SGD, RankInfo{}), scaled(OptimizerKind::SGD, RankInfo{}, Device::cpu(), DType::F32, quad);
  plain.step->forward_backward(input(3, false), targets(), 0, false, false);
  scaled.step->forward_backward(input(3, false), targets(), 0, false, false);
  const std::vector<Tensor> a = plain.optimizer->parameters(), b = scaled.optimizer->parameters();
  int compared = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].grad().defined()) continue;
    const Tensor four = ops::mul(a[i].grad(), 4.0);
    EXPECT_TRUE(kestrel::testing::all_close(b[i].grad(), four, 0, 0)) << i;
    ++compared;
  }
  EXPECT_GT(compared, 100);
  const std::vector<BatchStatus> p = plain.step->drain(), q = scaled.step->drain();
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(p[0].box, q[0].box);
  EXPECT_EQ(p[0].obj, q[0].obj);
  EXPECT_EQ(p[0].cls, q[0].cls);
}

// CUDA graphs capture device work: on the CPU they are refused with the way around it.
TEST(TrainStep, GraphModeNeedsCuda) {
  TrainStepOptions o;
  o.graphs = GraphMode::On;
  const std::string e = kestrel::testing::error_of([&] { Rig rig(OptimizerKind::SGD, RankInfo{}, Device::cpu(), DType::F32, o); });
  EXPECT_NE(e.find("CUDA graphs need a CUDA device"), std::string::npos) << e;
  EXPECT_NE(e.find("--cuda-graph off"), std::string::npos) << e;
}

// --- 2 ranks over Gloo (tests/dist/spawn.h runs this binary's worker case as each rank) --------

TEST(TrainStepGlooWorker, DISABLED_DdpStepIssuesNoBlockingRead) {
  const dist::DistOptions o =
      dist::resolve_dist_options(dist::DistFlags{}, dist::process_environment());
  RankInfo rank;
  rank.rank = o.rank;
  rank.world = o.world_size;
  rank.group = dist::init_process_group("gloo", o, Device::cpu());
  Rig rig(OptimizerKind::SGD, rank);
  constexpr int64_t kWarmup = 2, kStop = 3, kNonFinite = 4, kSteps = 6;
  std::vector<BatchStatus> statuses;
  std::vector<Tensor> before_skip;
  for (int64_t i = 0; i < kSteps; ++i) {
    const bool nonfinite = rank.rank == 1 && i == kNonFinite;
    const bool stop = rank.rank == 1 && i == kStop;
    const Tensor x = input(100 * rank.rank + i, nonfinite);
    if (i == kNonFinite)
      for (const Tensor& p : rig.optimizer->parameters()) before_skip.push_back(p.clone());
    // The first synchronised step re-lays out the buckets (one broadcast read back): warm-up.
    if (i < kWarmup) {
      rig.step->forward_backward(x, targets(), i, true, stop);
      for (const BatchStatus& s : rig.step->take_previous()) statuses.push_back(s);
      rig.step->optimizer_step();
      continue;
    }
    {
      HostSyncGuard none(HostSyncGuard::Policy::Throw);
      rig.step->forward_backward(x, targets(), i, true, stop);
    }
    // The previous batch's flags all-reduce ran before that batch's buckets, which the Reducer
    // waited for: its status is there before it is read.
    EXPECT_TRUE(rig.step->previous_ready()) << "batch " << i;
    {
      HostSyncGuard reads(HostSyncGuard::Policy::Count);
      for (const BatchStatus& s : rig.step->take_previous()) statuses.push_back(s);
      EXPECT_EQ(reads.count(), 1) << "batch " << i;
    }
    {
      HostSyncGuard none(HostSyncGuard::Policy::Throw);
      rig.step->optimizer_step();
    }
    // Rank 1's non-finite loss skips the step on both ranks (the CPU has run it by now).
    if (i == kNonFinite) {
      for (size_t k = 0; k < before_skip.size(); ++k)
        EXPECT_TRUE(kestrel::testing::all_close(rig.optimizer->parameters()[k], before_skip[k], 0, 0));
    }
  }
  for (const BatchStatus& s : rig.step->drain()) statuses.push_back(s);
  ASSERT_EQ(static_cast<int64_t>(statuses.size()), kSteps);
  for (int64_t i = 0; i < kSteps; ++i) {
    EXPECT_EQ(statuses[i].batch, i);
    EXPECT_EQ(statuses[i].stop_ranks, i == kStop ? 1 : 0) << "batch " << i;
    EXPECT_EQ(statuses[i].nonfinite_ranks, i == kNonFinite ? 1 : 0) << "batch " << i;
  }
  // The step after the skipped one applies, and the replicas stay identical throughout.
  bool moved = false;
  for (size_t k = 0; k < before_skip.size(); ++k)
    moved = moved || !kestrel::testing::all_close(rig.optimizer->parameters()[k], before_skip[k], 0, 0);
  EXPECT_TRUE(moved);
  dist::check_sync(*rank.group, rig.model->named_parameters(), "parameters");
  dist::check_sync(*rank.group, rig.optimizer->state_tensors(), "optimizer state");
}

TEST(TrainStepGloo, TwoRanksStepWithoutBlockingReadsAndAgreeOnFlags) {
  const auto results = kestrel::testing::run_ranks("TrainStepGlooWorker.DISABLED_DdpStepIssuesNoBlockingRead",
                                                   2, kestrel::testing::free_port(), {},
                                                   std::chrono::seconds(240));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kestrel::testing::describe(results);
}

}  // namespace
}  // namespace kestrel::yolo
