// StepStatusQueue in one process on the CPU: statuses come back in push order with their loss
// components and flags (a non-finite loss, a stop request), one counted host read each, and a
// malformed summary or an empty queue is refused.
#include "yolo/step_status.h"

#include <gtest/gtest.h>

#include <limits>

#include "engine/host_sync.h"
#include "kernels/step_flags.h"
#include "kernels/yolo_loss.h"

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

Tensor request(bool stop) { return Tensor::full({1}, stop ? 1.0 : 0.0, DType::F32); }

TEST(StepStatusQueue, StatusesComeBackInOrderWithTheirFlags) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  q.push(7, summary(0.5, 0.25, 0.125), request(false));
  q.push(8, summary(std::numeric_limits<double>::infinity(), 0.25, 0.125), request(false));
  EXPECT_EQ(q.newest_flags().to_vector<float>(), (std::vector<float>{1.0f, 0.0f}));
  q.push(9, summary(0.1, 0.2, 0.3), request(true));
  EXPECT_EQ(q.pending(), 3u);
  EXPECT_TRUE(q.oldest_ready());
  HostSyncGuard reads(HostSyncGuard::Policy::Count);
  const BatchStatus a = q.pop(), b = q.pop(), c = q.pop();
  EXPECT_EQ(reads.count(), 3);
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(a.batch, 7);
  EXPECT_EQ(a.nonfinite_ranks, 0);
  EXPECT_EQ(a.stop_ranks, 0);
  EXPECT_EQ(a.box, 0.5);
  EXPECT_EQ(a.obj, 0.25);
  EXPECT_EQ(a.cls, 0.125);
  EXPECT_EQ(b.batch, 8);
  EXPECT_EQ(b.nonfinite_ranks, 1);
  EXPECT_EQ(c.batch, 9);
  EXPECT_EQ(c.nonfinite_ranks, 0);
  EXPECT_EQ(c.stop_ranks, 1);
}

TEST(StepStatusQueue, RefusesBadInput) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  EXPECT_THROW(q.pop(), Error);
  EXPECT_THROW(q.newest_flags(), Error);
  EXPECT_THROW(q.push(0, Tensor::zeros({3}, DType::F64), request(false)), Error);
  EXPECT_THROW(q.push(0, summary(1, 1, 1).to(DType::F32), request(false)), Error);
  EXPECT_THROW(q.push(0, summary(1, 1, 1), Tensor::zeros({2})), Error);
  EXPECT_THROW(q.take_captured(), Error);
  q.push(0, summary(1, 1, 1), request(false));
  EXPECT_THROW(q.take_captured(), Error);  // pushed for the host, not for a capture
  q.discard_captured();                     // leaves an entry for the host alone
  EXPECT_EQ(q.pending(), 1u);
  q.push(1, summary(1, 1, 1), request(false), /*to_host=*/false);
  q.discard_captured();                     // a failed capture's entry goes
  EXPECT_EQ(q.pending(), 1u);
  EXPECT_EQ(q.pop().batch, 0);
}

// The bookkeeping of a CUDA graph's step, run on the CPU: the captured entry leaves the queue,
// and each replay's outputs are queued as a status of their own, unaffected when the graph's
// outputs are rewritten by the next replay.
TEST(StepStatusQueue, CapturedStatusIsTakenAndReplaysAreQueued) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  q.push(3, summary(0.5, 0.25, 0.125), request(true), /*to_host=*/false);
  EXPECT_EQ(q.newest_flags().to_vector<float>(), (std::vector<float>{0.0f, 1.0f}));
  EXPECT_THROW(q.pop(), Error);  // a captured status never ran
  const StepStatusQueue::Captured outputs = q.take_captured();
  EXPECT_EQ(q.pending(), 0u);
  q.push_replayed(4, outputs);
  outputs.flags.copy_(Tensor::from_vector(std::vector<float>{1.0f, 0.0f}, {2}));  // the next replay
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

}  // namespace
}  // namespace kestrel::yolo
