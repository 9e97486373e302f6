// Mask arithmetic against hand-derived cases and against the reference's own functions on fixed
// inputs (recorded with tests/scripts/mask_ops_reference.py: YOLOv5 v7.0, PyTorch 2.15 CPU,
// OpenCV 5.0 for cv2; the inputs are the integer formulas repeated below).
//
// Recorded per mask: the number of set pixels and the sum of their flat indices, which equal the
// reference's exactly (its dot products are exact by construction, see the script; only the
// sigmoid's last bit could differ, and no pixel here sits that close to 0.5). F.interpolate is
// compared bit for bit: the float64 sum of all outputs in row-major order, and three outputs' bits,
// on outputs of height + width > 128 (torch's generic CPU kernel, which image-sized masks take).
#include "yolo/eval/mask_ops.h"

#include <bit>
#include <cmath>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace kt = kestrel::testing;

namespace {

constexpr int64_t kNm = 32, kMh = 16, kMw = 24;

// The script's prototypes, in Kestrel's layout (mh, mw, nm).
Tensor prototypes() {
  std::vector<float> v(kMh * kMw * kNm);
  for (int64_t c = 0; c < kNm; ++c)
    for (int64_t y = 0; y < kMh; ++y)
      for (int64_t x = 0; x < kMw; ++x)
        v[(y * kMw + x) * kNm + c] = static_cast<float>((c * 131 + y * 31 + x * 17) % 97 - 48) / 32.0f;
  return Tensor::from_vector(v, {kMh, kMw, kNm});
}
Tensor coefficients(int64_t n) {
  std::vector<float> v(n * kNm);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < kNm; ++c)
      v[i * kNm + c] = static_cast<float>((i * 7 + c * 13 + 5) % 23 - 11) / 16.0f;
  return Tensor::from_vector(v, {n, kNm});
}
Tensor rows(const std::vector<float>& v, int64_t cols) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size()) / cols, cols});
}
const Tensor kBoxes = rows(
    {0, 0, 96, 64, 10.5f, 7.25f, 57.9f, 40.0f, -5, 20, 30.01f, 80, 30, 30, 30, 40, 64.2f, 2.6f, 95.1f, 31.7f},
    4);
const Tensor kNativeBoxes = rows({3.3f, 4.1f, 60.7f, 40.2f, 0, 0, 97, 50, 70.5f, 20.5f, 97, 50}, 4);

struct Summary {
  int64_t count, index_sum;
  bool operator==(const Summary&) const = default;
};
std::vector<Summary> summarize(const Tensor& masks) {
  std::vector<Summary> out;
  const int64_t n = masks.size(0), area = masks.numel() / std::max<int64_t>(n, 1);
  const uint8_t* p = masks.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    Summary s{0, 0};
    for (int64_t k = 0; k < area; ++k)
      if (p[i * area + k]) ++s.count, s.index_sum += k;
    out.push_back(s);
  }
  return out;
}
std::vector<uint8_t> bytes(const Tensor& t) { return t.to_vector<uint8_t>(); }
Tensor u8(const std::vector<uint8_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

}  // namespace

// --- crop_mask ----------------------------------------------------------------------------------

TEST(MaskOps, CropMaskKeepsIndicesFromX1UpToButNotX2) {
  // 1 x 4 x 6 of ones. Box [1.5, 0, 4, 2]: columns with x >= 1.5 and x < 4 (2, 3), rows 0 and 1.
  // Box [1, 1, 3, 3]: an integer edge keeps its own index on the left, not on the right: columns
  // 1, 2 and rows 1, 2. Boxes beyond the mask keep what they cover; a NaN edge keeps nothing.
  const Tensor ones = Tensor::ones({4, 4, 6});
  const float nan = std::nanf("");
  const Tensor boxes = rows({1.5f, 0, 4, 2, 1, 1, 3, 3, -10, -10, 100, 100, 0, nan, 6, 4}, 4);
  const std::vector<float> out = crop_mask(ones, boxes).to_vector<float>();
  std::vector<float> want(4 * 24, 0.0f);
  for (int y = 0; y < 2; ++y)
    for (int x = 2; x < 4; ++x) want[0 * 24 + y * 6 + x] = 1;
  for (int y = 1; y < 3; ++y)
    for (int x = 1; x < 3; ++x) want[1 * 24 + y * 6 + x] = 1;
  for (int k = 0; k < 24; ++k) want[2 * 24 + k] = 1;
  EXPECT_EQ(out, want);
}

// --- process_mask: hand case --------------------------------------------------------------------

// One prototype channel on a 2 x 2 grid, [[1, -1], [-1, 1]], coefficient 2: logits [[2, -2],
// [-2, 2]], sigmoids s = 0.8808 on the diagonal, t = 0.1192 off it. Upsampled 2x to 4 x 4, the
// taps per axis are (0, 1, w1 0), (0, 1, 0.25), (0, 1, 0.75), (1, 1, 0.25): row 0 reads
// s, 0.75s + 0.25t (0.69), 0.25s + 0.75t (0.31), t; row 1 mixes 3:1, giving 0.69, 0.5952,
// 0.4048, 0.31; rows 2 and 3 mirror them.
TEST(MaskOps, ProcessMaskHandCase) {
  const Tensor protos = Tensor::from_vector(std::vector<float>{1, -1, -1, 1}, {2, 2, 1});
  const Tensor coef = rows({2}, 1);
  const Tensor full = rows({0, 0, 8, 8}, 4);
  EXPECT_EQ(bytes(process_mask(protos, coef, full, {8, 8})), (std::vector<uint8_t>{1, 0, 0, 1}));
  const Tensor image4 = rows({0, 0, 4, 4}, 4);
  EXPECT_EQ(bytes(process_mask(protos, coef, image4, {4, 4}, true)),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1}));
  // Box [0, 0, 3, 4] on the 4 x 4 image is [0, 0, 1.5, 2] on the grid, which keeps both grid
  // columns (1 < 1.5): cropping before the upsampling changes nothing here, while cropping after
  // it (process_mask_upsample) keeps image columns 0-2 only.
  const Tensor left = rows({0, 0, 3, 4}, 4);
  EXPECT_EQ(bytes(process_mask(protos, coef, left, {4, 4}, true)),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1}));
  // Box [0, 0, 4, 2] is [0, 0, 2, 1] on the grid: grid row 1 becomes 0 before the upsampling, so
  // image row 1 reads 0.75 * row 0 (0.66, 0.52, 0.23, 0.09) and rows 2-3 at most 0.25s.
  EXPECT_EQ(bytes(process_mask(protos, coef, rows({0, 0, 4, 2}, 4), {4, 4}, true)),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(bytes(process_mask_upsample(protos, coef, left, {4, 4})),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0}));
}

TEST(MaskOps, ProcessMaskShapes) {
  const Tensor protos = prototypes();
  EXPECT_EQ(process_mask(protos, coefficients(5), kBoxes, {64, 96}).shape(), (Shape{5, kMh, kMw}));
  EXPECT_EQ(process_mask(protos, coefficients(5), kBoxes, {64, 96}, true).shape(), (Shape{5, 64, 96}));
  EXPECT_EQ(process_mask_upsample(protos, coefficients(5), kBoxes, {64, 96}).shape(), (Shape{5, 64, 96}));
  EXPECT_EQ(process_mask_native(protos, coefficients(3), kNativeBoxes, {50, 97}).shape(), (Shape{3, 50, 97}));
  EXPECT_EQ(process_mask(protos, coefficients(0), Tensor::zeros({0, 4}), {64, 96}).shape(),
            (Shape{0, kMh, kMw}));
  EXPECT_EQ(process_mask(protos, coefficients(5), kBoxes, {64, 96}).dtype(), DType::U8);
}

TEST(MaskOps, ProcessMaskRefusesBadInput) {
  const Tensor protos = prototypes();
  EXPECT_NE(kt::error_of([&] {
              process_mask(protos, rows(std::vector<float>(31, 0), 31), rows({0, 0, 1, 1}, 4), {64, 96});
            }).find("31 coefficients per detection for 32 prototypes"),
            std::string::npos);
  EXPECT_NE(kt::error_of([&] {
              process_mask(protos, coefficients(2), rows({0, 0, 1, 1}, 4), {64, 96});
            }).find("expected (2, 4)"),
            std::string::npos);
  EXPECT_NE(kt::error_of([&] {
              process_mask(protos.to(DType::F64), coefficients(1), rows({0, 0, 1, 1}, 4), {64, 96});
            }).find("prototypes (mh, mw, nm)"),
            std::string::npos);
  EXPECT_NE(kt::error_of([&] {
              process_mask(protos, coefficients(1), rows({0, 0, 1, 1}, 4), {0, 64});
            }).find("not positive"),
            std::string::npos);
}

// --- process_mask: the reference's numbers ------------------------------------------------------

TEST(MaskOps, ProcessMaskMatchesReference) {
  const Tensor protos = prototypes(), coef = coefficients(5);
  EXPECT_EQ(summarize(process_mask(protos, coef, kBoxes, {64, 96})),
            (std::vector<Summary>{{175, 33932}, {42, 5847}, {48, 12021}, {0, 0}, {20, 2210}}));
  EXPECT_EQ(summarize(process_mask(protos, coef, kBoxes, {64, 96}, true)),
            (std::vector<Summary>{{3008, 9378892}, {616, 1414328}, {764, 3105016}, {0, 0}, {310, 514904}}));
  EXPECT_EQ(summarize(process_mask_upsample(protos, coef, kBoxes, {64, 96})),
            (std::vector<Summary>{{3008, 9378892}, {675, 1559258}, {772, 3116131}, {0, 0}, {408, 681791}}));
  // The later reference's process_mask_native: rows 1-13 of the grid (padding 1.81 above and
  // below for a 50 x 97 image), upsampled to 50 x 97.
  EXPECT_EQ(summarize(process_mask_native(protos, coefficients(3), kNativeBoxes, {50, 97})),
            (std::vector<Summary>{{1017, 2264368}, {2218, 5382073}, {422, 1471550}}));
}

TEST(MaskOps, UpsampleBilinearMatchesInterpolateBitForBit) {
  std::vector<float> ramp(2 * 9 * 11);
  for (size_t k = 0; k < ramp.size(); ++k) ramp[k] = static_cast<float>((k * 37) % 101) / 101.0f;
  const Tensor x = Tensor::from_vector(ramp, {2, 9, 11});
  struct Case {
    int64_t h, w;
    double sum;
    std::array<uint32_t, 3> bits;  // y[0, 0, 0], y[1, h / 2, w / 3], y[1, h - 1, w - 1]
  };
  const std::vector<Case> cases = {
      {64, 70, 4421.411772697233, {0x00000000, 0x3f0ed1ba, 0x3e2c5b3f}},   // up
      {33, 100, 3255.395530955866, {0x00000000, 0x3f0d8c37, 0x3e2c5b3f}},  // up, uneven
      {7, 130, 897.6897518699989, {0x3b8b0b39, 0x3f0d26a6, 0x3e2802e4}},   // rows down
      {9, 120, 1065.4072009524098, {0x00000000, 0x3f102072, 0x3e2c5b3f}},  // rows copied
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.h) + " x " + std::to_string(c.w));
    const Tensor y = upsample_bilinear(x, c.h, c.w);
    ASSERT_EQ(y.shape(), (Shape{2, c.h, c.w}));
    const std::vector<float> v = y.to_vector<float>();
    double sum = 0;
    for (float f : v) sum += f;
    EXPECT_EQ(sum, c.sum);
    const auto at = [&](int64_t i, int64_t r, int64_t q) {
      return std::bit_cast<uint32_t>(v[(i * c.h + r) * c.w + q]);
    };
    EXPECT_EQ(at(0, 0, 0), c.bits[0]);
    EXPECT_EQ(at(1, c.h / 2, c.w / 3), c.bits[1]);
    EXPECT_EQ(at(1, c.h - 1, c.w - 1), c.bits[2]);
  }
}

// --- mask IoU and label masks -------------------------------------------------------------------

TEST(MaskOps, MaskIouCountsPixels) {
  // a0 = {0, 1}, a1 empty; b0 = {0, 2}, b1 everything. a0/b0: 1 / (2 + 2 - 1); a0/b1: 2 / 4;
  // empty masks: 0 / (area + 1e-7) = 0.
  const Tensor a = u8({1, 1, 0, 0, 0, 0, 0, 0}, {2, 2, 2});
  const Tensor b = u8({1, 0, 1, 0, 1, 1, 1, 1}, {2, 4});
  const std::vector<float> iou = mask_iou(a, b).to_vector<float>();
  EXPECT_EQ(iou, (std::vector<float>{1.0f / (3.0f + 1e-7f), 2.0f / (4.0f + 1e-7f), 0.0f, 0.0f}));
  // Masks longer than a word of bits, against a count done plainly.
  std::vector<uint8_t> big(3 * 200);
  for (size_t k = 0; k < big.size(); ++k) big[k] = (k * 7919) % 13 < 5;
  const Tensor m = u8(big, {3, 200});
  const std::vector<float> self = mask_iou(m, m).to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      int inter = 0, ai = 0, aj = 0;
      for (int k = 0; k < 200; ++k) {
        inter += big[i * 200 + k] & big[j * 200 + k];
        ai += big[i * 200 + k];
        aj += big[j * 200 + k];
      }
      const float fi = static_cast<float>(inter);
      EXPECT_EQ(self[i * 3 + j], fi / ((static_cast<float>(ai) + static_cast<float>(aj) - fi) + 1e-7f));
    }
  EXPECT_EQ(mask_iou(u8({}, {0, 4}), b).shape(), (Shape{0, 2}));
  EXPECT_NE(kt::error_of([&] {
              mask_iou(a, u8({1, 0, 1}, {1, 3}));
            }).find("same number of pixels"),
            std::string::npos);
  EXPECT_NE(kt::error_of([&] { mask_iou(a, u8({2, 0, 0, 0}, {1, 4})); }).find("holds 2"), std::string::npos);
}

TEST(MaskOps, LabelMasksSplitOverlapAndResize) {
  // Overlap: pixel value k marks label k - 1.
  const Tensor overlap = Tensor::from_vector(std::vector<float>{0, 1, 2, 2, 0, 1}, {1, 2, 3});
  EXPECT_EQ(bytes(label_masks(overlap, 2, true, {2, 3})),
            (std::vector<uint8_t>{0, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0}));
  // 2 x 2 -> 4 x 4: [[1, 0], [0, 0]] interpolates to rows [1, .75, .25, 0] and [.75, .5625,
  // .1875, 0], then rows of .25 and less; > 0.5 keeps the top-left 2 x 2.
  const Tensor one = Tensor::from_vector(std::vector<float>{1, 0, 0, 0}, {1, 2, 2});
  EXPECT_EQ(bytes(label_masks(one, 1, false, {4, 4})),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_NE(kt::error_of([&] {
              label_masks(one, 2, false, {2, 2});
            }).find("1 masks for 2 labels"),
            std::string::npos);
}

// --- scale_image and masks2segments -------------------------------------------------------------

namespace {
// Pixel (y, x) of mask i set when (7y + 3x + 5i) % 11 < 4, as the script's pattern().
Tensor pattern(int64_t n, int64_t h, int64_t w) {
  std::vector<uint8_t> v(n * h * w);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) v[(i * h + y) * w + x] = (7 * y + 3 * x + 5 * i) % 11 < 4;
  return u8(v, {n, h, w});
}
}  // namespace

TEST(MaskOps, ScaleMasksToOriginalMatchesReference) {
  // 16 x 16 letterboxed from 10 x 13: gain 16/13, padding (0, 1.85): rows 1-13 resized to
  // 10 x 13; with ratio_pad's padding (0.5, 2.5): rows 2-12, columns 0-14. Three channels and six
  // (cv2.resize runs on the (h, w, n) array either way).
  const std::vector<Summary> centred = {{31, 2009}, {32, 1889}, {33, 2143},
                                        {33, 2114}, {32, 2239}, {31, 1990}};
  const std::vector<Summary> padded = {{32, 2088}, {35, 2219}, {34, 2168},
                                       {35, 2239}, {34, 2219}, {36, 2322}};
  for (int64_t n : {3, 6}) {
    SCOPED_TRACE(n);
    const Tensor masks = pattern(n, 16, 16);
    const Tensor a = scale_masks_to_original(masks, {10, 13});
    ASSERT_EQ(a.shape(), (Shape{n, 10, 13}));
    EXPECT_EQ(summarize(a), std::vector<Summary>(centred.begin(), centred.begin() + n));
    const Tensor b = scale_masks_to_original(masks, {10, 13}, RatioPad{1.2, 0.5, 2.5});
    EXPECT_EQ(summarize(b), std::vector<Summary>(padded.begin(), padded.begin() + n));
  }
}

TEST(MaskOps, MasksToSegmentsMatchesReference) {
  // A 3 x 5 rectangle; a 2 x 2 square beside a staircase triangle whose contour has 3 points
  // (so "largest", by points, picks the square); nothing.
  std::vector<uint8_t> v(3 * 10 * 12, 0);
  for (int y = 3; y < 6; ++y)
    for (int x = 2; x < 7; ++x) v[y * 12 + x] = 1;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) v[120 + y * 12 + x] = 1;
  for (int y = 4; y < 10; ++y)
    for (int x = 5; x < 5 + y - 3; ++x) v[120 + y * 12 + x] = 1;
  const Tensor masks = u8(v, {3, 10, 12});
  using P = MaskPolygon;
  EXPECT_EQ(masks_to_segments(masks),
            (std::vector<P>{{{2, 3}, {2, 5}, {6, 5}, {6, 3}}, {{0, 0}, {0, 1}, {1, 1}, {1, 0}}, {}}));
  EXPECT_EQ(
      masks_to_segments(masks, SegmentStrategy::kConcat),
      (std::vector<P>{
          {{2, 3}, {2, 5}, {6, 5}, {6, 3}}, {{5, 4}, {5, 9}, {10, 9}, {0, 0}, {0, 1}, {1, 1}, {1, 0}}, {}}));
}
