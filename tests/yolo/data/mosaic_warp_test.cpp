#include "yolo/data/mosaic_warp.h"

#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>
#include <random>

#include "engine/random.h"
#include "yolo/common/hyp.h"
#include "yolo/data/augment.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

cv::Mat random_tile(std::mt19937& rng, int s) {
  std::uniform_int_distribution<int> side(s / 4, s);
  cv::Mat t(side(rng), side(rng), CV_8UC3);
  cv::randu(t, 0, 256);
  // Smooth regions as well as noise: bilinear rounding shows on both.
  cv::GaussianBlur(t(cv::Rect(0, 0, t.cols / 2, t.rows)), t(cv::Rect(0, 0, t.cols / 2, t.rows)),
                   cv::Size(9, 9), 3);
  return t;
}

// Today's canvas path: place_mosaic then cv::warpAffine with the reference's flags, then flips.
cv::Mat canvas_path(const std::array<cv::Mat, 4>& tiles, int s, int xc, int yc,
                    const cv::Matx23d& M, bool lr, bool ud) {
  Mosaic m = place_mosaic(tiles, {}, s, xc, yc);
  cv::Mat out;
  cv::warpAffine(m.image, out, cv::Mat(M), cv::Size(s, s), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                 cv::Scalar::all(kPadValue));
  if (ud) cv::flip(out, out, 0);
  if (lr) cv::flip(out, out, 1);
  return out;
}

cv::Matx23d affine_part(const cv::Matx33d& m) {
  return {m(0, 0), m(0, 1), m(0, 2), m(1, 0), m(1, 1), m(1, 2)};
}

// The fused warp reproduces OpenCV's fixed-point warpAffine of the canvas: every pixel equal, for
// the default hyperparameters' draws and for rotations and shears (seams, pad and canvas edges
// crossed at every angle), flipped or not.
TEST(MosaicWarp, EqualsTheCanvasPathBitForBit) {
  std::mt19937 rng(7);
  // The third: no rotation or shear but scales 0.1-1.9 (the separable warp, with pairs of taps too
  // far apart for its AVX2 step); s = 70 leaves the AVX2 loops a tail.
  yolo::Hyp hyps[3];
  hyps[1].degrees = 30, hyps[1].shear = 10, hyps[1].scale = 0.9;
  hyps[2].scale = 0.9;
  int case_index = 0;
  for (const yolo::Hyp& hyp : hyps)
    for (int s : {64, 70, 160}) {
      for (int k = 0; k < 12; ++k, ++case_index) {
        Generator gen(3, case_index);
        std::array<cv::Mat, 4> tiles;
        std::array<cv::Size, 4> sizes;
        for (int i = 0; i < 4; ++i) tiles[i] = random_tile(rng, s), sizes[i] = tiles[i].size();
        std::uniform_int_distribution<int> centre(s / 2, 3 * s / 2 - 1);
        const int xc = centre(rng), yc = centre(rng);
        const PerspectiveParams p = draw_perspective(gen, hyp);
        const cv::Matx23d M = affine_part(perspective_matrix(p, 2 * s, 2 * s, s, s));
        const bool lr = k % 2 == 1, ud = k % 3 == 2;
        const cv::Mat fused =
            warp_mosaic_affine(tiles, place_tiles(sizes, s, xc, yc), s, xc, yc, M, s, s, lr, ud);
        const cv::Mat expected = canvas_path(tiles, s, xc, yc, M, lr, ud);
        ASSERT_EQ(fused.size(), expected.size());
        EXPECT_EQ(cv::norm(fused, expected, cv::NORM_INF), 0)
            << "s " << s << " centre (" << xc << ", " << yc << ") scale " << p.scale << " degrees "
            << p.degrees << " shear " << p.shear_x << " flips " << lr << ud;
      }
    }
}

// Enlarging 8x and a matrix that moves the whole output off the canvas: the sub-pixel cells and
// the constant border.
TEST(MosaicWarp, CellsAndBorderMatchOpenCv) {
  std::mt19937 rng(11);
  const int s = 32;
  std::array<cv::Mat, 4> tiles;
  std::array<cv::Size, 4> sizes;
  for (int i = 0; i < 4; ++i) tiles[i] = random_tile(rng, s), sizes[i] = tiles[i].size();
  for (const cv::Matx23d& M : {cv::Matx23d(8, 0, -250, 0, 8, -240), cv::Matx23d(1, 0, 500, 0, 1, 0),
                               cv::Matx23d(0.3, 0.1, 3, -0.1, 0.3, 5)}) {
    const cv::Mat fused = warp_mosaic_affine(tiles, place_tiles(sizes, s, 30, 35), s, 30, 35, M, s, s);
    EXPECT_EQ(cv::norm(fused, canvas_path(tiles, s, 30, 35, M, false, false), cv::NORM_INF), 0);
  }
}

}  // namespace
