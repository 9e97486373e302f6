// StepStatusQueue in one process on the CPU: statuses come back in push order with their loss
// components and flags (a non-finite loss, a stop request, a graph replay), one counted host read
// each, and a malformed summary or an empty queue is refused; ranks that ran a batch differently
// (some replayed, some eager) are caught.
#include "yolo/train/step_status.h"

#include <gtest/gtest.h>

#include <limits>

#include "engine/host_sync.h"
#include "kernels/step_flags.h"
#include "kernels/yolo_loss.h"
#include "tests/support/testing.h"

namespace kestrel::yolo {
namespace {

Tensor summary(double box, double obj, double cls) {
  std::vector<double> s(kernels::kSummarySize, 0.0);
  s[kernels::kSummaryBox] = box;
  s[kernels::kSummaryObj] = obj;
  s[kernels::kSummaryCls] = cls;
  s[kernels::kSummaryBadRow] = -1;
  return Tensor::from_vector(s, {kernels::kSummarySize});
}

Tensor request(bool stop, bool replayed = false) {
  return Tensor::from_vector(std::vector<float>{stop ? 1.0f : 0.0f, replayed ? 1.0f : 0.0f},
                             {kernels::kStepRequests});
}

TEST(StepStatusQueue, StatusesComeBackInOrderWithTheirFlags) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  q.push(7, summary(0.5, 0.25, 0.125), request(false));
  q.push(8, summary(std::numeric_limits<double>::infinity(), 0.25, 0.125), request(false));
  EXPECT_EQ(q.newest_flags().to_vector<float>(), (std::vector<float>{1.0f, 0.0f, 0.0f}));
  q.push(9, summary(0.1, 0.2, 0.3), request(true, true));
  EXPECT_EQ(q.pending(), 3u);
  EXPECT_TRUE(q.oldest_ready());
  HostSyncGuard reads(HostSyncGuard::Policy::Count);
  const BatchStatus a = q.pop(), b = q.pop(), c = q.pop();
  EXPECT_EQ(reads.count(), 3);
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(a.batch, 7);
  EXPECT_EQ(a.nonfinite_ranks, 0);
  EXPECT_EQ(a.stop_ranks, 0);
  EXPECT_EQ(a.replayed_ranks, 0);
  EXPECT_EQ(a.box, 0.5);
  EXPECT_EQ(a.obj, 0.25);
  EXPECT_EQ(a.cls, 0.125);
  EXPECT_EQ(b.batch, 8);
  EXPECT_EQ(b.nonfinite_ranks, 1);
  EXPECT_EQ(c.batch, 9);
  EXPECT_EQ(c.nonfinite_ranks, 0);
  EXPECT_EQ(c.stop_ranks, 1);
  EXPECT_EQ(c.replayed_ranks, 1);
}

TEST(StepStatusQueue, RefusesBadInput) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  EXPECT_THROW(q.pop(), Error);
  EXPECT_THROW(q.newest_flags(), Error);
  EXPECT_THROW(q.push(0, Tensor::zeros({3}, DType::F64), request(false)), Error);
  EXPECT_THROW(q.push(0, summary(1, 1, 1).to(DType::F32), request(false)), Error);
  EXPECT_THROW(q.push(0, summary(1, 1, 1), Tensor::zeros({1})), Error);
  EXPECT_THROW(q.push(0, summary(1, 1, 1), Tensor::zeros({2}, DType::F64)), Error);
  EXPECT_THROW(q.take_captured(), Error);
  q.push(0, summary(1, 1, 1), request(false));
  EXPECT_THROW(q.take_captured(), Error);  // pushed for the host, not for a capture
  const StepStatusQueue::Snapshot before = q.snapshot();
  q.restore(before);  // leaves the entries it knew of alone
  EXPECT_EQ(q.pending(), 1u);
  q.push(1, summary(1, 1, 1), request(false), /*to_host=*/false);
  q.restore(before);  // a failed capture's entry goes
  EXPECT_EQ(q.pending(), 1u);
  EXPECT_EQ(q.pop().batch, 0);
  EXPECT_THROW(q.restore(before), Error);  // popped since: nothing to put back
}

// The bookkeeping of a CUDA graph's step, run on the CPU: the captured entry leaves the queue,
// and each replay's outputs are queued as a status of their own, unaffected when the graph's
// outputs are rewritten by the next replay.
TEST(StepStatusQueue, CapturedStatusIsTakenAndReplaysAreQueued) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  q.push(3, summary(0.5, 0.25, 0.125), request(true, true), /*to_host=*/false);
  EXPECT_EQ(q.newest_flags().to_vector<float>(), (std::vector<float>{0.0f, 1.0f, 1.0f}));
  EXPECT_THROW(q.pop(), Error);  // a captured status never ran
  const StepStatusQueue::Captured outputs = q.take_captured();
  EXPECT_EQ(q.pending(), 0u);
  q.push_replayed(4, outputs);
  outputs.flags.copy_(Tensor::from_vector(std::vector<float>{1.0f, 0.0f, 1.0f}, {3}));  // next replay
  outputs.losses.fill_(2.0);
  q.push_replayed(5, outputs);
  const BatchStatus a = q.pop(), b = q.pop();
  EXPECT_EQ(a.batch, 4);
  EXPECT_EQ(a.nonfinite_ranks, 0);
  EXPECT_EQ(a.stop_ranks, 1);
  EXPECT_EQ(a.box, 0.5);
  EXPECT_EQ(a.cls, 0.125);
  EXPECT_EQ(b.batch, 5);
  EXPECT_EQ(b.nonfinite_ranks, 1);
  EXPECT_EQ(b.stop_ranks, 0);
  EXPECT_EQ(b.obj, 2.0);
}

TEST(StepStatus, RanksThatRanABatchDifferentlyAreCaught) {
  BatchStatus s;
  s.batch = 41;
  for (int replayed : {0, 4}) {
    s.replayed_ranks = replayed;
    EXPECT_NO_THROW(check_ranks_ran_alike(s, 4));
  }
  s.replayed_ranks = 3;
  const std::string e = testing::error_of([&] { check_ranks_ran_alike(s, 4); });
  EXPECT_NE(e.find("batch 41: 3 of 4 ranks ran it as a CUDA graph replay"), std::string::npos) << e;
  EXPECT_NE(e.find("--cuda-graph off"), std::string::npos) << e;
  s.replayed_ranks = 1;
  EXPECT_NO_THROW(check_ranks_ran_alike(s, 1));  // one process: a replay is always unanimous
}

}  // namespace
}  // namespace kestrel::yolo
