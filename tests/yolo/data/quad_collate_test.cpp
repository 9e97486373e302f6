// --quad's collate: the bilinear 2x against PyTorch's own numbers, and the geometry: in a 2x2 tile
// and in an upsampled image, every label still covers its object's pixels.
#include "yolo/data/quad_collate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/support/testing.h"

namespace {

using namespace kestrel;
using namespace kestrel::yolo::data;

// F.interpolate(x.float(), scale_factor=2.0, mode='bilinear', align_corners=False).type(uint8)
// of this 3-channel 2x3 image, computed with PyTorch 1.13 (channel planes, row by row).
TEST(QuadCollate, UpsamplingIsPyTorchsBilinear) {
  const int in[3][2][3] = {{{10, 200, 37}, {0, 255, 128}}, {{1, 2, 3}, {250, 251, 252}}, {{90, 91, 92}, {7, 77, 177}}};
  const int want[3][4][6] = {
      {{10, 57, 152, 159, 77, 37}, {7, 59, 162, 175, 98, 59}, {2, 62, 181, 207, 139, 105}, {0, 63, 191, 223, 159, 128}},
      {{1, 1, 1, 2, 2, 3}, {63, 63, 64, 64, 65, 65}, {187, 188, 188, 189, 189, 189}, {250, 250, 250, 251, 251, 252}},
      {{90, 90, 90, 91, 91, 92}, {69, 73, 82, 93, 106, 113}, {27, 40, 67, 99, 136, 155}, {7, 24, 59, 102, 152, 177}}};
  uint8_t hwc[2 * 3 * 3], out[4 * 6 * 3];
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) hwc[(y * 3 + x) * 3 + c] = static_cast<uint8_t>(in[c][y][x]);
  upsample_bilinear_2x(hwc, 2, 3, out);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 6; ++x) EXPECT_EQ(out[(y * 6 + x) * 3 + c], want[c][y][x]) << c << " " << y << " " << x;
}

constexpr int kH = 16, kW = 24;

// n images of kH x kW, black, image i with one white box at a position of its own, labelled.
Batch boxes_batch(int n) {
  Batch b;
  b.images = Tensor::zeros({n, kH, kW, 3}, DType::U8);
  std::vector<float> rows;
  auto* px = b.images.data<uint8_t>();
  for (int i = 0; i < n; ++i) {
    const int x0 = 2 + 3 * (i % 4), y0 = 1 + 2 * (i % 4), w = 6, h = 4;  // pixel box [x0, x0 + w) x [y0, y0 + h)
    for (int y = y0; y < y0 + h; ++y)
      std::memset(px + ((static_cast<size_t>(i) * kH + y) * kW + x0) * 3, 255, static_cast<size_t>(w) * 3);
    rows.insert(rows.end(), {float(i), float(i % 3), (x0 + w / 2.0f) / kW, (y0 + h / 2.0f) / kH, float(w) / kW, float(h) / kH});
    b.paths.push_back("im" + std::to_string(i) + ".jpg");
    b.shapes.push_back(std::nullopt);
  }
  b.targets = Tensor::from_vector<float>(rows, {n, 6});
  return b;
}

// A generator whose first draw is below 0.5 (upsample) or not (tile).
Generator drawing(bool below_half) {
  for (uint64_t s = 0;; ++s) {
    Generator probe(s, 9);
    if ((probe.uniform() < 0.5) == below_half) return Generator(s, 9);
  }
}

// Every label of quad image q covers only white pixels, and the white pixels add up to the boxes.
void expect_boxes_on_pixels(const Batch& quad, int64_t q, int64_t boxes_expected) {
  const int64_t H = quad.images.size(1), W = quad.images.size(2);
  const auto* px = quad.images.data<uint8_t>() + q * H * W * 3;
  const auto* t = quad.targets.data<float>();
  int64_t area = 0, boxes = 0;
  for (int64_t r = 0; r < quad.targets.size(0); ++r) {
    if (t[r * 6] != q) continue;
    ++boxes;
    const double x0 = (t[r * 6 + 2] - t[r * 6 + 4] / 2) * W, x1 = (t[r * 6 + 2] + t[r * 6 + 4] / 2) * W;
    const double y0 = (t[r * 6 + 3] - t[r * 6 + 5] / 2) * H, y1 = (t[r * 6 + 3] + t[r * 6 + 5] / 2) * H;
    // Inside the box, one pixel in from its edge (where bilinear blends into the black), all white.
    for (int64_t y = std::lround(y0) + 1; y < std::lround(y1) - 1; ++y)
      for (int64_t x = std::lround(x0) + 1; x < std::lround(x1) - 1; ++x)
        EXPECT_EQ(px[(y * W + x) * 3], 255) << "quad " << q << " label " << r << " at " << x << "," << y;
    area += std::lround((x1 - x0) * (y1 - y0));
  }
  EXPECT_EQ(boxes, boxes_expected);
  int64_t white = 0;
  for (int64_t i = 0; i < H * W; ++i) white += px[i * 3] > 127;
  EXPECT_EQ(white, area) << "quad " << q << ": white pixels outside the labels, or labels off their pixels";
}

TEST(QuadCollate, TilesKeepEveryBoxOnItsPixels) {
  Generator gen = drawing(false);
  const Batch quad = quad_collate(boxes_batch(4), gen, false);
  ASSERT_EQ(quad.images.shape(), (Shape{1, 2 * kH, 2 * kW, 3}));
  ASSERT_EQ(quad.targets.size(0), 4);
  expect_boxes_on_pixels(quad, 0, 4);
  // Image 1 sits below image 0, image 2 right of it: labels in the reference's order and values.
  const auto* t = quad.targets.data<float>();
  EXPECT_FLOAT_EQ(t[1 * 6 + 3], (5.0f / kH + 1) * 0.5f);   // image 1: y moved down a tile
  EXPECT_FLOAT_EQ(t[2 * 6 + 2], (11.0f / kW + 1) * 0.5f);  // image 2: x moved right a tile
  EXPECT_EQ(t[3 * 6 + 1], 0.0f);                          // image 3's class (3 % 3)
  EXPECT_EQ(quad.paths, std::vector<std::string>{"im0.jpg"});
}

TEST(QuadCollate, AnUpsampledImageKeepsItsLabels) {
  Generator gen = drawing(true);
  const Batch in = boxes_batch(4);
  const Batch quad = quad_collate(in, gen, false);
  ASSERT_EQ(quad.images.shape(), (Shape{1, 2 * kH, 2 * kW, 3}));
  ASSERT_EQ(quad.targets.size(0), 1);
  for (int k = 1; k < 6; ++k) EXPECT_EQ(quad.targets.data<float>()[k], in.targets.data<float>()[k]);
  expect_boxes_on_pixels(quad, 0, 1);
}

// Images past the last group of 4 are dropped, as the reference; fewer than 4 cannot form one.
TEST(QuadCollate, LeftoverImagesAreDropped) {
  Generator gen(0, 9);
  const Batch quad = quad_collate(boxes_batch(7), gen, false);
  EXPECT_EQ(quad.images.size(0), 1);
  for (int64_t r = 0; r < quad.targets.size(0); ++r) EXPECT_EQ(quad.targets.data<float>()[r * 6], 0.0f);
  const std::string e = kestrel::testing::error_of([&] { quad_collate(boxes_batch(3), gen, false); });
  EXPECT_NE(e.find("groups of 4"), std::string::npos) << e;
}

}  // namespace
