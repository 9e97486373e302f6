// The reference's augmentations (v7.0 utils/augmentations.py and the mosaic of
// utils/dataloaders.py) as pure functions of an image, its boxes and explicit random draws, so
// each can be tested against hand-computed cases. Images are 8-bit BGR cv::Mat (as decoded);
// boxes travel in pixels (x1, y1, x2, y2) between the geometric steps and are normalised
// (class, x, y, w, h) at the end. The draws come from a kestrel::Generator: augment_pipeline.h
// wires these together in the reference's order.
#pragma once
#include <array>
#include <opencv2/core.hpp>
#include <optional>
#include <vector>

#include "engine/random.h"
#include "yolo/common/hyp.h"
#include "yolo/data/mosaic_warp.h"
#include "yolo/data/records.h"

namespace kestrel::yolo::data {

// Pad value of every border and canvas (the reference's grey 114).
inline constexpr int kPadValue = 114;

// A box in pixels of the image it belongs to.
struct PixelBox {
  int cls = 0;
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

// Normalised centre boxes of a w x h image -> pixel corners, shifted by (padw, padh).
std::vector<PixelBox> to_pixel_boxes(const std::vector<LabelBox>& boxes, double w, double h,
                                     double padw = 0, double padh = 0);
// Pixel corners -> normalised centre boxes of a w x h image, corners first clipped to
// [0, w - eps] x [0, h - eps] (the reference's xyxy2xywhn(clip=True, eps=1e-3)).
std::vector<LabelBox> to_normalised_boxes(const std::vector<PixelBox>& boxes, double w, double h,
                                          double eps = 1e-3);

// --- mosaic ------------------------------------------------------------------------------------

// Four images (already loaded at long side s) placed around the centre (xc, yc) of a 2s x 2s
// canvas filled with 114: tiles[0] top-left, [1] top-right, [2] bottom-left, [3] bottom-right,
// each cut where it crosses the canvas edge. Boxes are shifted with their tile and clipped to
// [0, 2s].
struct Mosaic {
  cv::Mat image;  // 2s x 2s
  std::vector<PixelBox> boxes;
};
Mosaic place_mosaic(const std::array<cv::Mat, 4>& tiles,
                    const std::array<std::vector<LabelBox>, 4>& labels, int s, int xc, int yc);
// The boxes of place_mosaic alone, from the tiles' sizes and placement (mosaic_warp.h).
std::vector<PixelBox> mosaic_boxes(const std::array<std::vector<LabelBox>, 4>& labels,
                                   const std::array<cv::Size, 4>& sizes,
                                   const std::array<TilePlacement, 4>& placement, int s);

// --- random perspective ------------------------------------------------------------------------

// One draw of random_perspective's parameters, in the reference's order and ranges.
struct PerspectiveParams {
  double px = 0, py = 0;        // perspective terms, uniform(-perspective, perspective)
  double degrees = 0;           // rotation, uniform(-degrees, degrees)
  double scale = 1;             // uniform(1 - scale, 1 + scale)
  double shear_x = 0, shear_y = 0;  // degrees, uniform(-shear, shear)
  double tx = 0.5, ty = 0.5;    // fraction of the output size, uniform(0.5 -+ translate)
};
PerspectiveParams draw_perspective(Generator& gen, const Hyp& hyp);

// The 3x3 matrix T * S * R * P * C of the reference mapping input pixels to output pixels, for
// an input of in_w x in_h and an output of out_w x out_h.
cv::Matx33d perspective_matrix(const PerspectiveParams& p, int in_w, int in_h, int out_w,
                               int out_h);

// Warps the image (bilinear, border 114) to (in + 2 * border) per side and transforms the boxes
// through their four corners, clips them to the output and keeps those box_candidates accepts
// (comparing with the input box scaled by p.scale). border is negative for a mosaic (-s/2 crops
// the 2s canvas back to s). The image is returned as is when nothing moves it.
struct Warped {
  cv::Mat image;
  std::vector<PixelBox> boxes;
};
Warped random_perspective(const cv::Mat& image, const std::vector<PixelBox>& boxes,
                          const PerspectiveParams& p, int border);

// random_perspective's boxes alone: the corners through M (divided by w when projective),
// clipped to width x height, kept when box_candidate accepts them against the input scaled by
// `scale`.
std::vector<PixelBox> warp_boxes(const std::vector<PixelBox>& boxes, const cv::Matx33d& M,
                                 bool projective, double scale, int width, int height);

// The reference's box_candidates: a box survives an augmentation when it is still more than
// wh_thr pixels wide and high, keeps more than area_thr of its (scaled) area and its aspect ratio
// stays below ar_thr.
bool box_candidate(const PixelBox& before, const PixelBox& after, double wh_thr = 2,
                   double ar_thr = 100, double area_thr = 0.1, double eps = 1e-16);

// --- colour and mixing -------------------------------------------------------------------------

// HSV gains in place: with r = (rh, rs, rv) multipliers, hue -> (hue * rh) mod 180, saturation and
// value -> clip(x * r, 0, 255), through 256-entry lookup tables on OpenCV's 8-bit HSV.
void apply_hsv_gains(cv::Mat& bgr, const std::array<double, 3>& r);
// The reference's augment_hsv: r_i = uniform(-1, 1) * gain_i + 1, skipped (no draws) when every
// gain is zero.
void augment_hsv(cv::Mat& bgr, double hgain, double sgain, double vgain, Generator& gen);
// augment_hsv's draws alone: nothing (and no draw) when every gain is zero.
std::optional<std::array<double, 3>> draw_hsv_gains(Generator& gen, double hgain, double sgain,
                                                    double vgain);
// BGR to the network's RGB in place, with the HSV gains applied when given: the pixels of
// apply_hsv_gains then a BGR to RGB swap, in three passes instead of five and no new image (the
// HSV to RGB conversion writes RGB directly). The image must own its pixels: a view of a cached
// image would change the cache.
void to_rgb_with_hsv_gains(cv::Mat& image, const std::optional<std::array<double, 3>>& r);

// A Beta(a, b) sample (two Marsaglia-Tsang gamma draws), for mixup's Beta(32, 32) ratio.
double sample_beta(Generator& gen, double a, double b);
// im * r + im2 * (1 - r), truncated to uint8 (same shapes).
cv::Mat blend(const cv::Mat& image, const cv::Mat& other, double r);

// --- flips -------------------------------------------------------------------------------------

// In place, with normalised labels mirrored.
void flip_lr(cv::Mat& image, std::vector<LabelBox>& labels);
void flip_ud(cv::Mat& image, std::vector<LabelBox>& labels);

// --- letterbox ---------------------------------------------------------------------------------

// Resize (aspect kept) and pad with 114 to new_h x new_w. scaleup=false only shrinks. auto_pad:
// pad only to the next multiple of stride (the minimum rectangle). ratio is the scale applied
// (w, h); pad the padding of each side before rounding (dw, dh): a pixel at x of the input lands
// at x * ratio_w + dw.
struct Letterboxed {
  cv::Mat image;
  double ratio_w = 1, ratio_h = 1;
  double pad_w = 0, pad_h = 0;
};
Letterboxed letterbox(const cv::Mat& image, int new_h, int new_w, bool auto_pad, bool scaleup,
                      int stride = 32);

}  // namespace kestrel::yolo::data
