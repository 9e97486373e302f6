// The CPU reference of the segmentation mask loss (kernels/mask_loss.h, through ops::mask_loss):
// per-positive losses against a naive float64 formula (every pixel tested against the crop with
// crop_mask's comparisons, BCE as log(1 + e^-z) + (1 - t) z in long double, the masks resized by
// nearest neighbour through floor(i * in / out)), with per-target and overlap (label) masks,
// masks of the prototypes' size, twice it and an uneven ratio, coefficients read from inside a
// wider matrix, rows shared by several positives, a crop outside the prototypes and an image
// without positives; the gradients w.r.t. coefficients and prototypes against central finite
// differences in float64; float32 within float accuracy of float64; bad positives refused.
#include <cmath>
#include <vector>

#include "engine/ops/mask_loss.h"
#include "kernels/mask_loss.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

namespace {

// A small problem: 3 images of 6x7 prototypes with nm = 5, coefficients at columns [2, 7) of an
// (8, 9) matrix, 6 positives (rows 1 and 1 shared, image 1 without positives).
struct Case {
  int64_t B = 3, mh = 6, mw = 7, nm = 5, R = 8, C = 9, column = 2;
  int64_t G = 0, gh = 6, gw = 7;
  bool overlap = false;
  std::vector<int32_t> coef_row, image, gt_row;
  std::vector<float> box, area, gt_label;
  Tensor coef, protos, masks;  // float64 CPU
};

Case make_case(bool overlap, int64_t gh, int64_t gw, uint64_t seed) {
  Case c;
  c.overlap = overlap;
  c.gh = gh;
  c.gw = gw;
  c.coef_row = {0, 1, 1, 3, 5, 6};
  c.image = {0, 0, 0, 0, 2, 2};
  // Fractional bounds, one box hanging over every edge, one outside the prototypes entirely.
  c.box = {0.5f, 1.2f, 4.0f, 5.0f,    -1.5f, -0.3f, 3.5f, 2.0f,  2.0f, 0.0f, 7.5f, 6.5f,
           1.0f, 1.0f, 1.0f, 4.0f,    0.25f, 2.75f, 6.2f, 4.1f,  8.0f, 7.0f, 9.0f, 8.0f};
  c.area = {0.3f, 0.12f, 0.55f, 0.05f, 0.2f, 0.01f};
  c.coef = random_tensor({c.R, c.C}, seed, DType::F64, -1.5, 1.5);
  c.protos = random_tensor({c.B, c.mh, c.mw, c.nm}, seed + 1, DType::F64, -1.5, 1.5);
  const Tensor u = random_tensor({overlap ? c.B : 6, gh, gw}, seed + 2, DType::F64, 0, 1);
  std::vector<double> m = u.to_vector<double>();
  if (overlap) {
    // Instance labels 0..3 per pixel; positives look for labels 1, 2, 3, 1 and 2, 3.
    for (double& v : m) v = std::floor(v * 4);
    c.G = c.B;
    c.gt_row = c.image;
    c.gt_label = {1, 2, 3, 1, 2, 3};
  } else {
    for (double& v : m) v = v < 0.5 ? 0.0 : 1.0;
    c.G = 6;
    c.gt_row = {4, 0, 1, 2, 5, 3};
    c.gt_label = std::vector<float>(6, 0.0f);
  }
  c.masks = Tensor::from_vector(m, {c.G, gh, gw});
  return c;
}

ops::MaskPositives positives_of(const Case& c) {
  const int64_t P = static_cast<int64_t>(c.image.size());
  return {Tensor::from_vector(c.coef_row, {P}), Tensor::from_vector(c.image, {P}),
          Tensor::from_vector(c.box, {P, 4}),   Tensor::from_vector(c.area, {P}),
          Tensor::from_vector(c.gt_row, {P}),   Tensor::from_vector(c.gt_label, {P})};
}

std::vector<double> naive_loss(const Case& c) {
  const std::vector<double> coef = c.coef.to_vector<double>(), proto = c.protos.to_vector<double>();
  const std::vector<double> masks = c.masks.to_vector<double>();
  std::vector<double> out;
  for (size_t p = 0; p < c.image.size(); ++p) {
    long double sum = 0;
    for (int64_t y = 0; y < c.mh; ++y) {
      for (int64_t x = 0; x < c.mw; ++x) {
        const float* b = &c.box[4 * p];
        if (!(float(x) >= b[0] && float(x) < b[2] && float(y) >= b[1] && float(y) < b[3])) continue;
        long double z = 0;
        for (int64_t k = 0; k < c.nm; ++k)
          z += static_cast<long double>(coef[c.coef_row[p] * c.C + c.column + k]) *
               proto[((c.image[p] * c.mh + y) * c.mw + x) * c.nm + k];
        const int64_t sy = std::min<int64_t>(std::floor(double(y) * c.gh / c.mh), c.gh - 1);
        const int64_t sx = std::min<int64_t>(std::floor(double(x) * c.gw / c.mw), c.gw - 1);
        const double v = masks[(c.gt_row[p] * c.gh + sy) * c.gw + sx];
        const long double t = c.overlap ? (v == c.gt_label[p] ? 1 : 0) : v;
        sum += std::log1p(std::exp(-z)) + (1 - t) * z;
      }
    }
    out.push_back(static_cast<double>(sum / (c.mh * c.mw) / c.area[p]));
  }
  return out;
}

Tensor loss_of(const Case& c, const Tensor& coef, const Tensor& protos) {
  return ops::mask_loss(coef, c.column, protos, positives_of(c), c.masks, c.overlap);
}

}  // namespace

TEST(MaskLossKernel, CropRangeFollowsCropMaskComparisons) {
  int64_t a, b;
  kernels::mask_crop_range(0.5f, 4.0f, 10, &a, &b);  // x >= 0.5 and x < 4: 1, 2, 3
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 4);
  kernels::mask_crop_range(-3.0f, 4.01f, 10, &a, &b);  // 0..4
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 5);
  kernels::mask_crop_range(2.0f, 2.0f, 10, &a, &b);  // empty
  EXPECT_EQ(a, b);
  kernels::mask_crop_range(9.5f, 30.0f, 10, &a, &b);
  EXPECT_EQ(a, 10);
  EXPECT_EQ(b, 10);
  kernels::mask_crop_range(NAN, 3.0f, 10, &a, &b);
  EXPECT_EQ(a, b);
  // F.interpolate's nearest source: same size, twice, and floor(i * (float)in / out) otherwise.
  EXPECT_EQ(kernels::mask_nearest_source(5, 8, 8), 5);
  EXPECT_EQ(kernels::mask_nearest_source(5, 4, 8), 2);
  EXPECT_EQ(kernels::mask_nearest_source(5, 16, 8), 10);
  EXPECT_EQ(kernels::mask_nearest_source(6, 9, 7), 7);
}

TEST(MaskLossKernel, MatchesNaiveFormula) {
  for (bool overlap : {false, true}) {
    for (auto [gh, gw] : {std::pair<int64_t, int64_t>{6, 7}, {12, 14}, {9, 5}, {3, 7}}) {
      SCOPED_TRACE(::testing::Message() << "overlap " << overlap << ", masks " << gh << "x" << gw);
      const Case c = make_case(overlap, gh, gw, 11 + gh);
      const std::vector<double> want = naive_loss(c);
      const std::vector<double> got = loss_of(c, c.coef, c.protos).to_vector<double>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t p = 0; p < want.size(); ++p)
        EXPECT_NEAR(got[p], want[p], 1e-12 * (1 + std::abs(want[p]))) << "positive " << p;
      EXPECT_EQ(got[5], 0.0);  // its crop lies outside the prototypes
      // The u8 form of the same masks gives the same losses.
      Case u8 = c;
      u8.masks = c.masks.to(DType::U8);
      EXPECT_EQ(loss_of(u8, c.coef, c.protos).to_vector<double>(), got);
    }
  }
}

TEST(MaskLossKernel, GradientsMatchFiniteDifferences) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "overlap " << overlap);
    const Case c = make_case(overlap, 9, 5, 5);
    const Tensor coef = c.coef.clone().set_requires_grad();
    const Tensor protos = c.protos.clone().set_requires_grad();
    EXPECT_TRUE(kestrel::testing::gradcheck(
        [&](const std::vector<Tensor>& in) { return loss_of(c, in[0], in[1]); }, {coef, protos}));
  }
}

// Rows and columns no positive reads get zero gradient; image 1 (no positives) too.
TEST(MaskLossKernel, GradientIsZeroWhereNothingIsRead) {
  const Case c = make_case(false, 6, 7, 3);
  const Tensor coef = c.coef.clone().set_requires_grad();
  const Tensor protos = c.protos.clone().set_requires_grad();
  loss_of(c, coef, protos).backward(Tensor::ones({6}, DType::F64));
  const std::vector<double> dc = coef.grad().to_vector<double>();
  for (int64_t r = 0; r < c.R; ++r) {
    const bool read = r == 0 || r == 1 || r == 3 || r == 5 || r == 6;
    for (int64_t k = 0; k < c.C; ++k) {
      const bool col = k >= c.column && k < c.column + c.nm;
      if (!read || !col) {
        EXPECT_EQ(dc[r * c.C + k], 0.0) << r << ", " << k;
      }
    }
  }
  EXPECT_NE(dc[1 * c.C + c.column], 0.0);
  const std::vector<double> dp = protos.grad().to_vector<double>();
  const int64_t per_image = c.mh * c.mw * c.nm;
  for (int64_t i = per_image; i < 2 * per_image; ++i) ASSERT_EQ(dp[i], 0.0) << i;
}

TEST(MaskLossKernel, Float32IsWithinFloatAccuracy) {
  const Case c = make_case(true, 12, 14, 7);
  const Tensor c64 = c.coef.clone().set_requires_grad(), p64 = c.protos.clone().set_requires_grad();
  const Tensor c32 = c.coef.to(DType::F32).set_requires_grad();
  const Tensor p32 = c.protos.to(DType::F32).set_requires_grad();
  const Tensor l64 = loss_of(c, c64, p64), l32 = loss_of(c, c32, p32);
  EXPECT_EQ(l32.dtype(), DType::F32);
  EXPECT_TRUE(kestrel::testing::all_close(l32, l64, 1e-6, 1e-5));
  l64.backward(Tensor::ones({6}, DType::F64));
  l32.backward(Tensor::ones({6}, DType::F32));
  EXPECT_TRUE(kestrel::testing::all_close(c32.grad(), c64.grad(), 1e-6, 1e-5));
  EXPECT_TRUE(kestrel::testing::all_close(p32.grad(), p64.grad(), 1e-6, 1e-5));
}

TEST(MaskLossKernel, RefusesBadPositives) {
  Case c = make_case(false, 6, 7, 3);
  c.image = {0, 0, 2, 0, 2, 2};  // not sorted by image
  EXPECT_NE(kestrel::testing::error_of([&] { loss_of(c, c.coef, c.protos); })
                .find("sort the positives"),
            std::string::npos);
  c = make_case(false, 6, 7, 3);
  c.gt_row[2] = 6;  // 6 masks
  EXPECT_NE(kestrel::testing::error_of([&] { loss_of(c, c.coef, c.protos); }).find("positive 2"),
            std::string::npos);
  c = make_case(false, 6, 7, 3);
  EXPECT_NE(kestrel::testing::error_of([&] {
              ops::mask_loss(c.coef, 5, c.protos, positives_of(c), c.masks, false);
            }).find("columns from column 5"),
            std::string::npos);
}
