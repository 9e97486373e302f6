// The Detect decode on the CPU against the reference's formulas written out in float64:
// xy = (2·σ(t) − 0.5 + cell)·stride, wh = (2·σ(t))²·anchor, the rest σ(t). float64 agrees to
// rounding (1e-12); float32 to its own rounding of a few operations (1e-5 relative).
#include "kernels/detect.h"

#include <cmath>

#include "tests/support/testing.h"

using namespace kestrel;

namespace {

const kernels::DetectLevelShape kShape{2, 3, 4, 5, 9, 16.0};
const float kAnchors[6] = {10, 13, 16, 30, 33, 23};

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

double expected(double raw, int64_t i) {
  const auto& s = kShape;
  const int64_t o = i % s.no, x = (i / s.no) % s.nx, y = (i / (s.no * s.nx)) % s.ny;
  const int64_t a = (i / (s.no * s.nx * s.ny)) % s.na;
  const double g = sigmoid(raw);
  switch (o) {
    case 0: return (2 * g - 0.5 + x) * s.stride;
    case 1: return (2 * g - 0.5 + y) * s.stride;
    case 2: return 4 * g * g * kAnchors[2 * a];
    case 3: return 4 * g * g * kAnchors[2 * a + 1];
    default: return g;
  }
}

}  // namespace

TEST(DetectDecode, MatchesTheReferenceFormulas) {
  for (auto [dtype, rtol] : {std::pair{DType::F64, 1e-12}, std::pair{DType::F32, 1e-5}}) {
    const Tensor raw = kestrel::testing::random_tensor({kShape.numel()}, 5, dtype, -6, 6);
    const Tensor out = Tensor::empty_like(raw);
    kernels::detect_decode_cpu(dtype, raw.data_ptr(), out.data_ptr(), kShape, kAnchors);
    const std::vector<double> r = raw.to_double_vector(), d = out.to_double_vector();
    for (int64_t i = 0; i < kShape.numel(); ++i)
      ASSERT_NEAR(d[i], expected(r[i], i), rtol * (1 + std::abs(expected(r[i], i))))
          << dtype_name(dtype) << " element " << i;
  }
}
