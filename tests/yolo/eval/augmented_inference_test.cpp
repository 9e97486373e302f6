// Test-time augmentation against numbers from the reference: scale_img's bilinear resize, mirror
// and padding (values printed by PyTorch 1.13's F.interpolate/F.pad on the CPU for the same
// input), _descale_pred and _clip_augmented, and the whole augmented prediction's layout.
#include "yolo/eval/augmented_inference.h"

#include <cmath>

#include "engine/autograd.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

// A 5x6 two-channel NHWC image holding 0, 0.25, 0.5, ... in memory order.
Tensor ramp_image() {
  std::vector<float> v(5 * 6 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i);
  return Tensor::from_vector(v, {1, 5, 6, 2});
}

void expect_same(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  // torch's CPU kernel sums the four neighbours in the same order: the same float, give or take
  // the one rounding a fused multiply-add could save.
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::abs(want[i]))) << i;
}

constexpr float kPad = 0.446999997f;

}  // namespace

TEST(AugmentedInference, ScaledSizesAreTheReferences) {
  // int(h * ratio), then math.ceil(h * ratio / gs) * gs.
  const ScaledSize a = tta_scaled_size(320, 320, 0.83, 32);
  EXPECT_EQ(a.h, 265);
  EXPECT_EQ(a.padded_h, 288);
  const ScaledSize b = tta_scaled_size(352, 480, 0.67, 32);
  EXPECT_EQ(b.h, 235);  // 235.84
  EXPECT_EQ(b.w, 321);  // 321.6
  EXPECT_EQ(b.padded_h, 256);
  EXPECT_EQ(b.padded_w, 352);
  const ScaledSize c = tta_scaled_size(100, 70, 1.0, 32);  // scale 1: untouched, even unpadded
  EXPECT_EQ(c.padded_h, 100);
  EXPECT_EQ(c.padded_w, 70);
}

TEST(AugmentedInference, MirroredScaleMatchesTorch) {
  // scale_img(x.flip(3), 0.83, gs=2): 4x4 resized, padded to 6x6.
  const Tensor y = tta_scale_image(ramp_image(), 0.83, 2, true);
  ASSERT_EQ(y.shape(), (Shape{1, 6, 6, 2}));
  std::vector<float> want = {2.75f, 3, 2, 2.25f, 1.25f, 1.5f, 0.5f, 0.75f, kPad, kPad, kPad, kPad,
                             6.5f, 6.75f, 5.75f, 6, 5, 5.25f, 4.25f, 4.5f, kPad, kPad, kPad, kPad,
                             10.25f, 10.5f, 9.5f, 9.75f, 8.75f, 9, 8, 8.25f, kPad, kPad, kPad, kPad,
                             14, 14.25f, 13.25f, 13.5f, 12.5f, 12.75f, 11.75f, 12, kPad, kPad, kPad, kPad};
  want.resize(6 * 6 * 2, kPad);
  expect_same(y.to_vector<float>(), want);
}

TEST(AugmentedInference, ScaleMatchesTorch) {
  // scale_img(x, 0.67, gs=2): 3x4 resized, padded to 4x6.
  const Tensor y = tta_scale_image(ramp_image(), 0.67, 2, false);
  ASSERT_EQ(y.shape(), (Shape{1, 4, 6, 2}));
  std::vector<float> want = {1.125f, 1.37499988f, 1.875f, 2.125f, 2.625f, 2.875f, 3.375f, 3.625f, kPad, kPad, kPad,
                             kPad, 6.12499952f, 6.37499952f, 6.87499952f, 7.125f, 7.625f, 7.875f, 8.37499905f,
                             8.62499905f, kPad, kPad, kPad, kPad, 11.125f, 11.375f, 11.875f, 12.125f, 12.625f,
                             12.875f, 13.375f, 13.624999f, kPad, kPad, kPad, kPad};
  want.resize(4 * 6 * 2, kPad);
  expect_same(y.to_vector<float>(), want);
}

TEST(AugmentedInference, UnscaledUnmirroredImageIsUntouched) {
  const Tensor x = ramp_image();
  EXPECT_EQ(tta_scale_image(x, 1.0, 32, false).data_ptr(), x.data_ptr());
  // Mirrored at scale 1: the columns reversed, nothing interpolated or padded.
  const std::vector<float> m = tta_scale_image(x, 1.0, 32, true).to_vector<float>();
  const std::vector<float> v = x.to_vector<float>();
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 6; ++c)
      for (int64_t ch = 0; ch < 2; ++ch) EXPECT_EQ(m[(r * 6 + c) * 2 + ch], v[(r * 6 + 5 - c) * 2 + ch]);
}

TEST(AugmentedInference, DescaleDividesAndUnmirrors) {
  const Tensor p = Tensor::from_vector(std::vector<float>{10, 20, 30, 40, 0.9f, 0.1f, 1, 2, 3, 4, 0.5f, 0.7f}, {1, 2, 6});
  const std::vector<float> plain = tta_descale(p, 0.5, false, 64).to_vector<float>();
  EXPECT_EQ(plain, (std::vector<float>{20, 40, 60, 80, 0.9f, 0.1f, 2, 4, 6, 8, 0.5f, 0.7f}));
  const std::vector<float> mirrored = tta_descale(p, 0.83, true, 64).to_vector<float>();
  EXPECT_FLOAT_EQ(mirrored[0], 64.0f - 10.0f / 0.83f);  // 51.9518...
  EXPECT_NEAR(mirrored[0], 51.95181, 1e-4);
  EXPECT_FLOAT_EQ(mirrored[1], 20.0f / 0.83f);
  EXPECT_FLOAT_EQ(mirrored[3], 40.0f / 0.83f);  // widths are not mirrored
  EXPECT_FLOAT_EQ(mirrored[4], 0.9f);
  EXPECT_FLOAT_EQ(mirrored[6], 64.0f - 1.0f / 0.83f);
  EXPECT_EQ(p.to_vector<float>()[0], 10.0f);  // the input is left alone
}

TEST(AugmentedInference, ClipDropsTheLargeAndTheSmallTails) {
  // Three levels of a 64x64 image, 3 anchors: 192 + 48 + 12 rows. The first pass loses its last
  // 12 (stride 32), the last its first 192 (stride 8): the reference's 252 // 21 * 1 and * 16.
  auto rows = [](int64_t n) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
    return Tensor::from_vector(v, {1, n, 1});
  };
  const std::vector<Tensor> clipped = tta_clip({rows(252), rows(100), rows(252)}, 3);
  ASSERT_EQ(clipped.size(), 3u);
  EXPECT_EQ(clipped[0].size(1), 240);
  EXPECT_EQ(clipped[0].contiguous().to_vector<float>().back(), 239.0f);
  EXPECT_EQ(clipped[1].size(1), 100);
  EXPECT_EQ(clipped[2].size(1), 60);
  EXPECT_EQ(clipped[2].contiguous().to_vector<float>().front(), 192.0f);
}

TEST(AugmentedInference, PredictionJoinsThePasses) {
  DetectionModel model(load_model_config("models/yolov5n.yaml"), 2, 0);
  model.train(false);
  autograd::NoGradGuard no_grad;
  const Tensor x = kestrel::testing::random_tensor({1, 64, 96, 3}, 3, DType::F32, 0.0, 1.0);
  const Tensor plain = model.predict(x).boxes;
  const Tensor augmented = predict_augmented(model, x);
  // 64x96: 3 levels of 8x12, 4x6 and 2x3 cells. 0.83 -> 53x79 and 0.67 -> 42x64, both padded to
  // 64x96 again (the padding rounds 53.12 and 42.88 up). The first pass loses its 2x3 level, the
  // last its 8x12 one.
  const int64_t full = 3 * (96 + 24 + 6);
  ASSERT_EQ(augmented.shape(), (Shape{1, (full - 18) + full + (full - 288), 7}));
  const std::vector<float> a = augmented.to_vector<float>(), p = plain.to_vector<float>();
  for (int64_t i = 0; i < (full - 18) * 7; ++i) ASSERT_EQ(a[i], p[i]) << i;  // the first pass, as it is
}
