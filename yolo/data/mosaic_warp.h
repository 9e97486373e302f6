// The training mosaic's pixels in one pass: the 640x640 output of place_mosaic + an affine
// random_perspective computed straight from the four tiles, with no 2s x 2s canvas.
//
// The canvas is only ever read through the warp, so it is a function: a canvas pixel is a tile's
// pixel where that tile was placed, else grey 114, and beyond the canvas the warp's constant border
// is 114 too. warp_mosaic_affine evaluates cv::warpAffine(canvas, M, INTER_LINEAR,
// BORDER_CONSTANT 114) with OpenCV's own fixed-point arithmetic on that function:
//   - M is inverted in double as warpAffine does; the source position of output pixel (x, y) is
//     X = (round((M1 y + M2) 1024) + 16 + round(M0 x 1024)) >> 5, likewise Y, so (X >> 5, Y >> 5)
//     is the top-left tap and (X & 31, Y & 31) the 1/32 sub-pixel cell;
//   - the cell's four weights are OpenCV's 15-bit bilinear table (sum 32768) and the result is
//     (sum of tap x weight + 16384) >> 15.
// So the output equals today's canvas path bit for bit (tests/yolo/data/mosaic_warp_test.cpp),
// while reading only the 640x640 output's taps instead of filling and copying 1280x1280.
#pragma once
#include <array>
#include <opencv2/core.hpp>

namespace kestrel::yolo::data {

// Where a mosaic tile lands on the 2s x 2s canvas: the canvas rectangle [x1, x2) x [y1, y2) shows
// the tile's pixel (x - dx, y - dy). (dx, dy) also shifts the tile's boxes.
struct TilePlacement {
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  int dx = 0, dy = 0;
};

// The reference's load_mosaic placement around the centre (xc, yc): tile 0 top-left, 1 top-right,
// 2 bottom-left, 3 bottom-right, each touching the centre with one corner and cut at the canvas
// edge. sizes are (width, height) of tiles with long side <= s.
std::array<TilePlacement, 4> place_tiles(const std::array<cv::Size, 4>& sizes, int s, int xc,
                                         int yc);

// The affine warp (forward 2x3 matrix M, canvas -> output, as given to cv::warpAffine) of the
// mosaic canvas 2s x 2s made of `tiles` (8-bit BGR) placed by `placement`, into an out_w x out_h
// BGR image. With flip_lr / flip_ud the output comes out mirrored (cv::flip of the warp). When
// `into` is already an out_h x out_w 8-bit BGR image (say a batch's slot), the output is written
// there and shares its pixels.
cv::Mat warp_mosaic_affine(const std::array<cv::Mat, 4>& tiles,
                           const std::array<TilePlacement, 4>& placement, int s, int xc, int yc,
                           const cv::Matx23d& M, int out_w, int out_h, bool flip_lr = false,
                           bool flip_ud = false, cv::Mat into = {});

}  // namespace kestrel::yolo::data
