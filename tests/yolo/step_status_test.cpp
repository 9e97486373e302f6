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

TEST(StepStatusQueue, StatusesComeBackInOrderWithTheirFlags) {
  StepStatusQueue q(RankInfo{}, Device::cpu());
  q.push(7, summary(0.5, 0.25, 0.125), false);
  q.push(8, summary(std::numeric_limits<double>::infinity(), 0.25, 0.125), false);
  EXPECT_EQ(q.newest_flags().to_vector<float>(), (std::vector<float>{1.0f, 0.0f}));
  q.push(9, summary(0.1, 0.2, 0.3), true);
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
  EXPECT_THROW(q.push(0, Tensor::zeros({3}, DType::F64), false), Error);
  EXPECT_THROW(q.push(0, summary(1, 1, 1).to(DType::F32), false), Error);
}

}  // namespace
}  // namespace kestrel::yolo
