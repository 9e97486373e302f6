// The step flags on the CPU: finite loss components give 0, an inf or NaN component 1 (also
// when the non-finite values would cancel in a sum); the stop and replay requests pass through as
// 0 or 1.
#include "kernels/step_flags.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

using namespace kestrel::kernels;

TEST(StepFlags, NonFiniteLossStopRequestAndReplay) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  float flags[kStepFlags];
  const float none[kStepRequests] = {0.0f, 0.0f};
  const float stop[kStepRequests] = {1.0f, 0.0f};
  const float replayed[kStepRequests] = {0.0f, 1.0f};
  const float other[kStepRequests] = {2.5f, -3.0f};  // any non-zero request counts as one rank
  const std::vector<double> good = {0.1, 0.2, 0.3};
  step_flags_cpu(good.data(), none, flags);
  EXPECT_EQ(flags[kFlagNonFinite], 0.0f);
  EXPECT_EQ(flags[kFlagStop], 0.0f);
  EXPECT_EQ(flags[kFlagReplayed], 0.0f);
  step_flags_cpu(good.data(), stop, flags);
  EXPECT_EQ(flags[kFlagNonFinite], 0.0f);
  EXPECT_EQ(flags[kFlagStop], 1.0f);
  EXPECT_EQ(flags[kFlagReplayed], 0.0f);
  step_flags_cpu(good.data(), replayed, flags);
  EXPECT_EQ(flags[kFlagStop], 0.0f);
  EXPECT_EQ(flags[kFlagReplayed], 1.0f);
  step_flags_cpu(good.data(), other, flags);
  EXPECT_EQ(flags[kFlagStop], 1.0f);
  EXPECT_EQ(flags[kFlagReplayed], 1.0f);
  for (const std::vector<double>& bad : {std::vector<double>{nan, 0.2, 0.3}, {0.1, inf, 0.3},
                                         {0.1, 0.2, -inf}, {inf, -inf, 0.0}}) {
    step_flags_cpu(bad.data(), none, flags);
    EXPECT_EQ(flags[kFlagNonFinite], 1.0f);
  }
  EXPECT_EQ(loss_nonfinite(good.data()), 0.0f);
}
