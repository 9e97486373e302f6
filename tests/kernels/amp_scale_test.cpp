// The loss scaler's CPU kernels: unscaling equals the old host formula (kernels::scale_cpu with
// factor float(1 / scale)) bit for bit in float and double and flags inf and NaN; the combined
// skip flag's truth table; and the scale schedule against the host GradScaler::update it replaces
// (double products rounded to float32), over a sequence of good and non-finite steps.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/amp_scale.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kernels::TensorList;
using kestrel::testing::random_tensor;

namespace {

std::vector<Tensor> random_list(DType dtype, uint64_t seed) {
  std::vector<Tensor> out;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, kernels::kListChunk + 3})
    out.push_back(random_tensor({n}, seed + n, dtype, -70000, 70000));
  return out;
}

TensorList list_of(const std::vector<Tensor>& ts) {
  TensorList list(1);
  for (const Tensor& t : ts) list.add({t.data_ptr()}, t.numel());
  return list;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

// The host schedule of the GradScaler before the state moved to the device.
struct OldSchedule {
  double scale;
  int64_t tracker = 0, skipped = 0;
  void update(bool found_inf, double growth, double backoff, int64_t interval) {
    if (found_inf) {
      scale = static_cast<float>(scale * backoff);
      tracker = 0;
      ++skipped;
    } else if (++tracker == interval) {
      const float grown = static_cast<float>(scale * growth);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    }
  }
};

}  // namespace

TEST(AmpScaleKernels, InverseScaleIsExactForPowersOfTwoAndRoundsOnceOtherwise) {
  for (int e = -20; e <= 60; ++e) {
    const float s = std::ldexp(1.0f, e);
    EXPECT_EQ(kernels::inverse_scale(s), std::ldexp(1.0f, -e)) << e;
  }
  for (float s : {3.0f, 1000.0f, 65535.0f, 1e-3f})
    EXPECT_EQ(kernels::inverse_scale(s), static_cast<float>(1.0 / static_cast<double>(s))) << s;
}

TEST(AmpScaleKernels, UnscaleMatchesTheOldScaleFormulaBitwise) {
  for (DType dtype : {DType::F32, DType::F64}) {
    for (float scale : {65536.0f, 1024.0f, 0.5f, 3.0f}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " scale " + std::to_string(scale));
      std::vector<Tensor> mine = random_list(dtype, 11), old;
      for (const Tensor& t : mine) old.push_back(t.clone());
      float found = 0.0f;
      kernels::unscale_cpu(dtype, list_of(mine), &scale, &found);
      const double factor = static_cast<float>(1.0 / static_cast<double>(scale));
      EXPECT_FALSE(kernels::scale_cpu(dtype, list_of(old), factor));
      EXPECT_EQ(found, 0.0f);
      for (size_t k = 0; k < mine.size(); ++k) EXPECT_TRUE(same_bits(mine[k], old[k])) << k;
    }
  }
}

TEST(AmpScaleKernels, UnscaleFlagsInfAndNanAndNeverClearsTheFlag) {
  const float scale = 1024.0f;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::nanf("")}) {
    std::vector<Tensor> ts = random_list(DType::F32, 12);
    ts[3].data<float>()[kernels::kListChunk + 1] = bad;  // in the last chunk of the last tensor
    float found = 0.0f;
    kernels::unscale_cpu(DType::F32, list_of(ts), &scale, &found);
    EXPECT_EQ(found, 1.0f) << bad;
  }
  std::vector<Tensor> good = random_list(DType::F32, 13);
  float found = 1.0f;  // set by an earlier list of the same step
  kernels::unscale_cpu(DType::F32, list_of(good), &scale, &found);
  EXPECT_EQ(found, 1.0f);
  // The largest finite float is no inf: no flag, and it unscales like any other value.
  float big = std::numeric_limits<float>::max();
  TensorList one(1);
  one.add({&big}, 1);
  found = 0.0f;
  kernels::unscale_cpu(DType::F32, one, &scale, &found);
  EXPECT_EQ(found, 0.0f);
  EXPECT_EQ(big, std::numeric_limits<float>::max() / 1024.0f);
}

TEST(AmpScaleKernels, UnscaleRefusesOtherDepthsAndDtypes) {
  float x = 1.0f, y = 2.0f, scale = 2.0f, found = 0.0f;
  TensorList two(2);
  two.add({&x, &y}, 1);
  using kestrel::testing::error_of;
  EXPECT_NE(error_of([&] { kernels::unscale_cpu(DType::F32, two, &scale, &found); })
                .find("single tensors"),
            std::string::npos);
  TensorList one(1);
  one.add({&x}, 1);
  EXPECT_NE(error_of([&] { kernels::unscale_cpu(DType::F16, one, &scale, &found); })
                .find("float32 and float64"),
            std::string::npos);
}

TEST(AmpScaleKernels, CombinedSkipIsCallerFlagOrFoundInf) {
  const float zero = 0.0f, one = 1.0f, two = 2.0f;
  float out = -1.0f;
  kernels::combine_skip_cpu(nullptr, &zero, &out);
  EXPECT_EQ(out, 0.0f);
  kernels::combine_skip_cpu(nullptr, &one, &out);
  EXPECT_EQ(out, 1.0f);
  kernels::combine_skip_cpu(&zero, &zero, &out);
  EXPECT_EQ(out, 0.0f);
  kernels::combine_skip_cpu(&two, &zero, &out);  // a window of two non-finite losses
  EXPECT_EQ(out, 1.0f);
  kernels::combine_skip_cpu(&one, &one, &out);
  EXPECT_EQ(out, 1.0f);
  kernels::combine_skip_cpu(&zero, &one, &out);
  EXPECT_EQ(out, 1.0f);
}

TEST(AmpScaleKernels, UpdateFollowsTheOldHostScheduleAndClearsTheFlag) {
  const kernels::ScaleSchedule s{2.0, 0.5, 3};
  std::mt19937_64 rng(5);
  float scale = 65536.0f, found = 0.0f;
  int32_t tracker = 0;
  int64_t skipped = 0;
  OldSchedule old{65536.0};
  for (int i = 0; i < 400; ++i) {
    const bool bad = rng() % 4 == 0;
    found = bad ? 1.0f : 0.0f;
    kernels::update_scale_cpu(&scale, &tracker, &skipped, &found, s);
    old.update(bad, 2.0, 0.5, 3);
    ASSERT_EQ(scale, old.scale) << i;
    ASSERT_EQ(tracker, old.tracker) << i;
    ASSERT_EQ(skipped, old.skipped) << i;
    ASSERT_EQ(found, 0.0f) << i;
  }
  EXPECT_GT(skipped, 50);
}

TEST(AmpScaleKernels, GrowthThatWouldOverflowKeepsTheScale) {
  const kernels::ScaleSchedule s{2.0, 0.5, 1};
  float scale = std::ldexp(1.0f, 127), found = 0.0f;  // 2^128 is not a float
  int32_t tracker = 0;
  int64_t skipped = 0;
  kernels::update_scale_cpu(&scale, &tracker, &skipped, &found, s);
  EXPECT_EQ(scale, std::ldexp(1.0f, 127));
  EXPECT_EQ(tracker, 0);
  scale = 1.0f;
  kernels::update_scale_cpu(&scale, &tracker, &skipped, &found, s);
  EXPECT_EQ(scale, 2.0f);
  found = 1.0f;
  kernels::update_scale_cpu(&scale, &tracker, &skipped, &found, s);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(skipped, 1);
}
