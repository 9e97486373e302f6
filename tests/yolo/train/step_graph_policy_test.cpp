// When TrainStep's graph mode runs a batch eagerly, captures it or replays it (StepGraphPolicy),
// on the CPU: warm-up before the first capture, one eager run per new shape, replays of a
// captured shape, every graph dropped when the addresses they baked in change, and graphs given
// up when that keeps happening.
#include "yolo/train/step_graph_policy.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace kestrel::yolo {
namespace {

using Action = StepGraphPolicy::Action;

StepKey key(int64_t rows, bool step_now = true, int64_t size = 64) {
  return {{2, size, size, 3}, DType::BF16, rows, step_now};
}

// decide() and the report a caller makes for what it did.
Action step(StepGraphPolicy& p, const StepKey& k, uint64_t fingerprint) {
  const Action a = p.decide(k, fingerprint);
  if (p.must_drop()) p.acknowledge_drop();
  if (a == Action::Eager) p.ran_eager(k);
  if (a == Action::Capture) p.captured(k);
  if (a != Action::Eager) p.replayed();
  return a;
}

TEST(StepGraphPolicy, WarmsUpThenCapturesOnceThenReplays) {
  StepGraphPolicy p(2);
  EXPECT_EQ(step(p, key(64), 1), Action::Eager);  // first run of the shape
  EXPECT_EQ(step(p, key(64), 2), Action::Eager);  // addresses changed (gradients appeared)
  EXPECT_EQ(step(p, key(64), 2), Action::Capture);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(step(p, key(64), 2), Action::Replay);
  EXPECT_EQ(p.stats().eager_steps, 2);
  EXPECT_EQ(p.stats().captures, 1);
  EXPECT_EQ(p.stats().replays, 6);
  EXPECT_EQ(p.stats().invalidations, 0);
}

TEST(StepGraphPolicy, NoCaptureBeforeTheWarmUpOptimizerSteps) {
  StepGraphPolicy p(3);
  // Accumulating batches do not count as optimizer steps.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(step(p, key(64, false), 7), Action::Eager);
  EXPECT_EQ(step(p, key(64, true), 7), Action::Eager);
  EXPECT_EQ(step(p, key(64, true), 7), Action::Eager);
  EXPECT_EQ(step(p, key(64, false), 7), Action::Eager);
  EXPECT_EQ(step(p, key(64, true), 7), Action::Eager);  // the third optimizer step
  EXPECT_EQ(step(p, key(64, false), 7), Action::Capture);
  EXPECT_EQ(step(p, key(64, true), 7), Action::Capture);  // its own graph
  EXPECT_EQ(step(p, key(64, false), 7), Action::Replay);
  EXPECT_EQ(step(p, key(64, true), 7), Action::Replay);
  EXPECT_EQ(p.stats().captures, 2);
}

TEST(StepGraphPolicy, ANewShapeRunsEagerlyOnceThenGetsItsGraph) {
  StepGraphPolicy p(1);
  step(p, key(64), 5);
  EXPECT_EQ(step(p, key(64), 5), Action::Capture);
  EXPECT_EQ(step(p, key(128), 5), Action::Eager);  // more targets: a new shape
  EXPECT_EQ(step(p, key(64), 5), Action::Replay);
  EXPECT_EQ(step(p, key(128), 5), Action::Capture);
  EXPECT_EQ(step(p, key(128), 5), Action::Replay);
  EXPECT_EQ(step(p, key(64, true, 96), 5), Action::Eager);  // another image size
  EXPECT_EQ(step(p, key(64, true, 96), 5), Action::Capture);
  EXPECT_EQ(p.stats().captures, 3);
}

TEST(StepGraphPolicy, ChangedAddressesDropEveryGraphUntilStableAgain) {
  StepGraphPolicy p(1);
  step(p, key(64), 5);
  step(p, key(64), 5);
  step(p, key(128), 5);
  step(p, key(128), 5);  // two graphs
  EXPECT_EQ(p.stats().captures, 2);
  EXPECT_EQ(p.decide(key(64), 6), Action::Eager);  // e.g. a re-laid-out gradient buffer
  EXPECT_TRUE(p.must_drop());
  EXPECT_THROW(p.decide(key(64), 6), Error);  // the caller must drop them first
  p.acknowledge_drop();
  p.ran_eager(key(64));
  EXPECT_EQ(step(p, key(64), 6), Action::Capture);  // stable across that eager step
  EXPECT_EQ(step(p, key(128), 6), Action::Eager);   // its graph went too
  EXPECT_EQ(step(p, key(128), 6), Action::Capture);
  EXPECT_EQ(p.stats().invalidations, 1);
  EXPECT_TRUE(p.disabled_reason().empty());
}

TEST(StepGraphPolicy, AddressesThatKeepChangingGiveGraphsUp) {
  StepGraphPolicy p(1);
  uint64_t fp = 1;
  step(p, key(64), fp);
  for (int round = 0; round <= StepGraphPolicy::kMaxInvalidations; ++round) {
    step(p, key(64), fp);   // stable: capture (or eager while given up)
    step(p, key(64), ++fp); // changed: drop
  }
  EXPECT_FALSE(p.disabled_reason().empty());
  const int64_t captures = p.stats().captures;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(step(p, key(64), fp), Action::Eager);
  EXPECT_EQ(p.stats().captures, captures);
  EXPECT_NE(p.disabled_reason().find("addresses changed"), std::string::npos);
}

TEST(StepGraphPolicy, ShapesBeyondTheGraphLimitRunEagerly) {
  StepGraphPolicy p(1, 2);
  for (int64_t rows : {64, 128, 256}) {
    step(p, key(rows), 5);
    step(p, key(rows), 5);
  }
  EXPECT_EQ(p.stats().captures, 2);
  EXPECT_EQ(step(p, key(256), 5), Action::Eager);  // the third shape: no graph
  EXPECT_EQ(step(p, key(64), 5), Action::Replay);
  EXPECT_EQ(step(p, key(128), 5), Action::Replay);
}

TEST(StepGraphPolicy, AFailedCaptureTurnsGraphsOff) {
  StepGraphPolicy p(1);
  step(p, key(64), 5);
  EXPECT_EQ(p.decide(key(64), 5), Action::Capture);
  p.give_up("capture failed: a host read");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(step(p, key(64), 5), Action::Eager);
  EXPECT_EQ(p.disabled_reason(), "capture failed: a host read");
  EXPECT_EQ(p.stats().captures, 0);
}

TEST(StepGraphPolicy, AFailedCaptureStopsEveryMultiProcessRun) {
  EXPECT_TRUE(capture_failure_stops_run(true, 1));    // --cuda-graph on
  EXPECT_FALSE(capture_failure_stops_run(false, 1));  // auto, one process: falls back
  EXPECT_TRUE(capture_failure_stops_run(false, 2));   // auto, DDP: ranks would disagree
  EXPECT_TRUE(capture_failure_stops_run(true, 8));
}

TEST(StepGraphPolicy, NeedsAWarmUpAndRoomForAGraph) {
  EXPECT_THROW(StepGraphPolicy(0), Error);
  EXPECT_THROW(StepGraphPolicy(1, 0), Error);
}

TEST(StepKey, DescribesItself) {
  EXPECT_EQ(key(128, false).describe(), "2x64x64x3 bfloat16, 128 target rows, accumulating");
}

}  // namespace
}  // namespace kestrel::yolo
