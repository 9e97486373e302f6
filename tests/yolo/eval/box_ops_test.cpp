// Box helpers against hand-computed values: corner conversion, the reference's float32 IoU (its
// 1e-7 in the denominator shows on tiny boxes), and letterbox scale-back with and without the
// loader's ratio/pad, clipping included.
#include "yolo/eval/box_ops.h"

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {
Tensor rows(const std::vector<float>& v, int64_t cols) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size()) / cols, cols});
}
}  // namespace

TEST(BoxOps, Xywh2XyxyHalvesTheSize) {
  Tensor out = xywh2xyxy(rows({10, 20, 4, 6, 0, 0, 3, 1}, 4));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{8, 17, 12, 23, -1.5f, -0.5f, 1.5f, 0.5f}));
}

TEST(BoxOps, IouMatchesHandValues) {
  // a = [0,0,10,10]; b0 overlaps a quarter (inter 25, union 175); b1 is disjoint; b2 equals a
  // (100 / (100 + 1e-7f) rounds to exactly 1 in float32).
  Tensor a = rows({0, 0, 10, 10}, 4);
  Tensor b = rows({5, 5, 15, 15, 20, 20, 30, 30, 0, 0, 10, 10}, 4);
  std::vector<float> iou = box_iou(a, b).to_vector<float>();
  ASSERT_EQ(iou.size(), 3u);
  EXPECT_EQ(iou[0], 25.0f / (175.0f + 1e-7f));
  EXPECT_NEAR(iou[0], 1.0 / 7.0, 1e-7);
  EXPECT_EQ(iou[1], 0.0f);
  EXPECT_EQ(iou[2], 1.0f);
  // A 1e-3 square against itself: area 1e-6, so the eps is a tenth of the denominator.
  Tensor tiny = rows({0, 0, 1e-3f, 1e-3f}, 4);
  EXPECT_NEAR(box_iou(tiny, tiny).item(), 1e-6 / (1e-6 + 1e-7), 1e-4);
}

TEST(BoxOps, IouShapeIsRowsByColumns) {
  Tensor a = rows({0, 0, 1, 1, 0, 0, 2, 2}, 4);
  Tensor b = rows({0, 0, 1, 1, 0, 0, 2, 2, 5, 5, 6, 6}, 4);
  Tensor iou = box_iou(a, b);
  EXPECT_EQ(iou.shape(), (Shape{2, 3}));
  // [0,0,1,1] vs [0,0,2,2]: 1 / 4.
  EXPECT_NEAR(iou.to_vector<float>()[1], 0.25, 1e-6);
  EXPECT_NEAR(iou.to_vector<float>()[3], 0.25, 1e-6);
}

TEST(BoxOps, ScaleBoxesWithRatioPadUndoesTheLetterbox) {
  // A 960x1280 (h x w) image letterboxed to 640x640: gain 0.5, 80 px of padding on top.
  Tensor b = rows({100, 180, 200, 280, 0.9f, 3, -10, 70, 700, 650, 0.5f, 1}, 6);
  scale_boxes(b, {640, 640}, {960, 1280}, RatioPad{0.5, 0.0, 80.0});
  // Row 0: ((100 - 0) / 0.5, (180 - 80) / 0.5, ...); row 1 clipped to [0, 1280] x [0, 960];
  // conf and class untouched.
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{200, 200, 400, 400, 0.9f, 3,  //
                                                      0, 0, 1280, 960, 0.5f, 1}));
}

TEST(BoxOps, ScaleBoxesDerivesGainAndPadFromTheShapes) {
  // 300x500 into 640x640: gain min(640/300, 640/500) = 1.28, pad ((640 - 640) / 2,
  // (640 - 384) / 2) = (0, 128).
  Tensor b = rows({64, 192, 320, 448}, 4);
  scale_boxes(b, {640, 640}, {300, 500});
  const std::vector<float> v = b.to_vector<float>();
  const std::vector<float> want = {50, 50, 250, 250};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[i], want[i], 1e-4) << i;
  // The derived pad matches an explicit one.
  Tensor c = rows({64, 192, 320, 448}, 4);
  scale_boxes(c, {640, 640}, {300, 500}, RatioPad{1.28, 0.0, 128.0});
  EXPECT_EQ(c.to_vector<float>(), v);
}

TEST(BoxOps, ClipBoxesClampsEachCoordinate) {
  Tensor b = rows({-5, -5, 50, 50, 10, 20, 30, 40}, 4);
  clip_boxes(b, {30, 40});  // height 30, width 40
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0, 0, 40, 30, 10, 20, 30, 30}));
}

TEST(BoxOps, RefusesBadInput) {
  EXPECT_THROW(xywh2xyxy(rows({1, 2, 3}, 3)), Error);
  EXPECT_THROW(box_iou(Tensor::zeros({2, 4}, DType::F64), rows({0, 0, 1, 1}, 4)), Error);
  Tensor b = rows({0, 0, 1, 1}, 4);
  EXPECT_THROW(scale_boxes(b, {640, 640}, {0, 10}), Error);
  EXPECT_THROW(scale_boxes(b, {640, 640}, {10, 10}, RatioPad{0.0, 0, 0}), Error);
}
