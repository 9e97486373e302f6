// TrainStep's CUDA graph mode on a GPU (yolov5n, 64 px, batch 2; skipped without a CUDA device):
//   - replaying the captured step gives the eager step's results: the same per-batch losses and
//     the same parameters, optimizer state and EMA after 8 batches (5 or more of them replayed),
//     in float32, bf16 and fp16 (the loss scaler on the device), with SGD and Adam, and with
//     gradient accumulation (one graph per accumulating and per stepping shape);
//   - a steady replay allocates nothing from the system (no cudaMalloc) and makes no blocking
//     host read but the previous batch's status;
//   - the per-batch values a graph reads from device memory follow the host: a stop request, the
//     warm-up's changing lr, a non-finite batch (skipped on the device, inside a replay);
//   - a new target count is a new shape: it runs eagerly once, then is captured;
//   - a capture that fails (here: a host read inside it) stops the run with the way around it,
//     or (--cuda-graph auto) turns graphs off and the run goes on eagerly, as if never captured.
// Bitwise equality is expected: eager and graphed steps launch the same kernels in the same
// order, and the convolutions use deterministic cuDNN algorithms.
#include <cmath>

#include "engine/allocator.h"
#include "engine/host_sync.h"
#include "engine/stream.h"
#include "tests/support/testing.h"
#include "tests/yolo/train/train_step_rig.h"

namespace kestrel::yolo {
namespace {

using testing::input;
using testing::expect_same_batch_counts;
using testing::expect_same_state;
using testing::Rig;
using testing::targets;

const Device kGpu = Device::cuda(0);

TrainStepOptions graphed() {
  TrainStepOptions o;
  o.graphs = GraphMode::On;
  o.graph_warmup_steps = 1;
  return o;
}

struct Plan {
  int batches = 8;
  int accumulate = 1;        // an optimizer step every `accumulate` batches
  int nonfinite_batch = -1;  // this batch's input is NaN
  int stop_batch = -1;       // the host asks to stop at this batch
  bool warmup_lr = false;    // change every group's lr before each batch, as the warm-up does
};

struct Outcome {
  std::vector<BatchStatus> statuses;
  GraphStats graphs;
};

Outcome train(Rig& rig, DType compute, const Plan& plan) {
  const Tensor t = targets().to(kGpu);
  Outcome out;
  for (int i = 0; i < plan.batches; ++i) {
    if (plan.warmup_lr)
      for (size_t g = 0; g < rig.optimizer->groups().size(); ++g) {
        Optimizer::Rates r = rig.optimizer->rates(g);
        r.lr = 0.01 * (i + 1) / plan.batches;
        rig.optimizer->set_rates(g, r);
      }
    const bool step_now = (i + 1) % plan.accumulate == 0;
    const Tensor x = input(40 + i, i == plan.nonfinite_batch).to(compute).to(kGpu);
    rig.step->run(x, t, i, step_now, i == plan.stop_batch);
    for (const BatchStatus& s : rig.step->take_previous()) out.statuses.push_back(s);
  }
  for (const BatchStatus& s : rig.step->drain()) out.statuses.push_back(s);
  out.graphs = rig.step->graph_stats();
  return out;
}

void expect_replay_equals_eager(OptimizerKind kind, DType compute, const Plan& plan) {
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  Rig eager(kind, RankInfo{}, kGpu, compute);
  Rig graph(kind, RankInfo{}, kGpu, compute, graphed());
  const Outcome e = train(eager, compute, plan), g = train(graph, compute, plan);
  ASSERT_EQ(g.statuses.size(), e.statuses.size());
  int64_t replayed = 0;
  for (size_t i = 0; i < e.statuses.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(e.statuses[i].replayed_ranks, 0);
    EXPECT_LE(g.statuses[i].replayed_ranks, 1);
    replayed += g.statuses[i].replayed_ranks;
    EXPECT_EQ(g.statuses[i].batch, e.statuses[i].batch);
    EXPECT_EQ(g.statuses[i].nonfinite_ranks, e.statuses[i].nonfinite_ranks);
    EXPECT_EQ(g.statuses[i].stop_ranks, e.statuses[i].stop_ranks);
    EXPECT_EQ(g.statuses[i].box, e.statuses[i].box);
    EXPECT_EQ(g.statuses[i].obj, e.statuses[i].obj);
    EXPECT_EQ(g.statuses[i].cls, e.statuses[i].cls);
  }
  expect_same_state(graph, eager);
  expect_same_batch_counts(graph, eager);  // replays count their batches on the device
  EXPECT_EQ(replayed, g.graphs.replays) << "each replayed batch's flags say so";
  EXPECT_GE(g.graphs.replays, 5) << "the graphs must carry most batches";
  EXPECT_EQ(g.graphs.invalidations, 0);
  EXPECT_TRUE(graph.step->graphs_disabled_reason().empty());
  stream.synchronize();
}

TEST(TrainStepGraphCuda, ReplayEqualsEagerFloat32Sgd) {
  KESTREL_SKIP_WITHOUT_CUDA();
  expect_replay_equals_eager(OptimizerKind::SGD, DType::F32, Plan{});
}

TEST(TrainStepGraphCuda, ReplayEqualsEagerBf16Adam) {
  KESTREL_SKIP_WITHOUT_CUDA();
  expect_replay_equals_eager(OptimizerKind::Adam, DType::BF16, Plan{});
}

TEST(TrainStepGraphCuda, ReplayEqualsEagerFp16WithTheLossScaler) {
  KESTREL_SKIP_WITHOUT_CUDA();
  expect_replay_equals_eager(OptimizerKind::SGD, DType::F16, Plan{});
}

TEST(TrainStepGraphCuda, ReplayEqualsEagerWithAccumulationAndWarmupLr) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Plan p;
  p.batches = 12;
  p.accumulate = 2;
  p.warmup_lr = true;
  expect_replay_equals_eager(OptimizerKind::SGD, DType::BF16, p);
}

TEST(TrainStepGraphCuda, NonFiniteBatchAndStopRequestInsideReplays) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Plan p;
  p.nonfinite_batch = 5;
  p.stop_batch = 6;
  expect_replay_equals_eager(OptimizerKind::Adam, DType::BF16, p);
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  Rig rig(OptimizerKind::SGD, RankInfo{}, kGpu, DType::BF16, graphed());
  const Outcome o = train(rig, DType::BF16, p);
  ASSERT_EQ(o.statuses.size(), 8u);
  EXPECT_EQ(o.statuses[5].nonfinite_ranks, 1);
  EXPECT_EQ(o.statuses[6].stop_ranks, 1);
  EXPECT_EQ(o.statuses[7].stop_ranks, 0);
  EXPECT_GE(o.graphs.replays, 5);
}

TEST(TrainStepGraphCuda, SteadyReplayAllocatesNothingAndReadsOnlyTheStatus) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  Rig rig(OptimizerKind::SGD, RankInfo{}, kGpu, DType::BF16, graphed());
  const Tensor t = targets().to(kGpu);
  std::vector<Tensor> inputs;
  for (int i = 0; i < 10; ++i) inputs.push_back(input(60 + i, false).to(DType::BF16).to(kGpu));
  for (int i = 0; i < 4; ++i) {  // eager, eager, capture + replay, replay
    rig.step->run(inputs[i], t, i, true, false);
    rig.step->take_previous();
  }
  ASSERT_EQ(rig.step->graph_stats().captures, 1);
  const size_t raw_device = allocator_stats(kGpu).raw_allocs;
  for (int i = 4; i < 10; ++i) {
    {
      HostSyncGuard none(HostSyncGuard::Policy::Throw);
      rig.step->run(inputs[i], t, i, true, false);
    }
    HostSyncGuard reads(HostSyncGuard::Policy::Count);
    EXPECT_EQ(rig.step->take_previous().size(), 1u);
    EXPECT_LE(reads.count(), 3);  // one finished copy's event (see train_step_cuda_test)
  }
  rig.step->drain();
  EXPECT_EQ(allocator_stats(kGpu).raw_allocs, raw_device) << "a steady replay called cudaMalloc";
  EXPECT_EQ(rig.step->graph_stats().captures, 1);
  EXPECT_EQ(rig.step->graph_stats().replays, 8);
}

TEST(TrainStepGraphCuda, ANewTargetCountIsCapturedAfterOneEagerRun) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  Rig rig(OptimizerKind::SGD, RankInfo{}, kGpu, DType::BF16, graphed());
  const Tensor t64 = pad_targets(targets(), 64).to(kGpu), t128 = pad_targets(targets(), 128).to(kGpu);
  const Tensor x = input(70, false).to(DType::BF16).to(kGpu);
  for (int i = 0; i < 3; ++i) rig.step->run(x, t64, i, true, false);  // eager, eager, capture
  rig.step->run(x, t128, 3, true, false);                                // eager: new shape
  rig.step->run(x, t64, 4, true, false);                                 // replay
  rig.step->run(x, t128, 5, true, false);                                // capture
  rig.step->run(x, t128, 6, true, false);                                // replay
  const std::vector<BatchStatus> s = rig.step->drain();
  ASSERT_EQ(s.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(s[i].batch, i);
  for (const BatchStatus& b : s) EXPECT_TRUE(std::isfinite(b.box) && b.box > 0) << b.batch;
  const GraphStats g = rig.step->graph_stats();
  EXPECT_EQ(g.captures, 2);
  EXPECT_EQ(g.replays, 4);
  EXPECT_EQ(g.eager_steps, 3);
}

TEST(TrainStepGraphCuda, AFailedCaptureStopsOrFallsBackToEagerSteps) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  TrainStepOptions o = graphed();
  o.capture_probe = [] { (void)Tensor::zeros({1}, DType::F32, kGpu).item(); };
  {
    Rig rig(OptimizerKind::SGD, RankInfo{}, kGpu, DType::BF16, o);
    const std::string e = kestrel::testing::error_of([&] { train(rig, DType::BF16, Plan{}); });
    EXPECT_NE(e.find("into a CUDA graph failed"), std::string::npos) << e;
    EXPECT_NE(e.find("--cuda-graph off"), std::string::npos) << e;
  }
  stream.synchronize();
  o.capture_failure_fatal = false;
  for (OptimizerKind kind : {OptimizerKind::SGD, OptimizerKind::Adam}) {
    Rig eager(kind, RankInfo{}, kGpu, DType::F16), fallback(kind, RankInfo{}, kGpu, DType::F16, o);
    const Outcome e = train(eager, DType::F16, Plan{}), f = train(fallback, DType::F16, Plan{});
    ASSERT_EQ(f.statuses.size(), e.statuses.size());
    for (size_t i = 0; i < e.statuses.size(); ++i) EXPECT_EQ(f.statuses[i].box, e.statuses[i].box) << i;
    expect_same_state(fallback, eager);
    expect_same_batch_counts(fallback, eager);  // the failed capture counted nothing
    EXPECT_EQ(f.graphs.captures, 0);
    EXPECT_EQ(f.graphs.replays, 0);
    EXPECT_NE(fallback.step->graphs_disabled_reason().find("into a CUDA graph failed"), std::string::npos);
  }
  stream.synchronize();
}

}  // namespace
}  // namespace kestrel::yolo
