// The step flags on the CPU: finite loss components give 0, an inf or NaN component 1 (also
// when the non-finite values would cancel in a sum); the stop request passes through.
#include "kernels/step_flags.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

using namespace kestrel::kernels;

TEST(StepFlags, NonFiniteLossAndStopRequest) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  float flags[kStepFlags];
  const float no = 0.0f, yes = 1.0f, other = 2.5f;
  const std::vector<double> good = {0.1, 0.2, 0.3};
  step_flags_cpu(good.data(), &no, flags);
  EXPECT_EQ(flags[kFlagNonFinite], 0.0f);
  EXPECT_EQ(flags[kFlagStop], 0.0f);
  step_flags_cpu(good.data(), &yes, flags);
  EXPECT_EQ(flags[kFlagNonFinite], 0.0f);
  EXPECT_EQ(flags[kFlagStop], 1.0f);
  step_flags_cpu(good.data(), &other, flags);  // any non-zero request counts as one rank
  EXPECT_EQ(flags[kFlagStop], 1.0f);
  for (const std::vector<double>& bad : {std::vector<double>{nan, 0.2, 0.3}, {0.1, inf, 0.3},
                                         {0.1, 0.2, -inf}, {inf, -inf, 0.0}}) {
    step_flags_cpu(bad.data(), &no, flags);
    EXPECT_EQ(flags[kFlagNonFinite], 1.0f);
  }
  EXPECT_EQ(loss_nonfinite(good.data()), 0.0f);
}
