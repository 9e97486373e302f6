// Geometric augmentations: box conversions, mosaic placement, random perspective, the candidate
// filter and letterbox (colour, mixing and flips: augment_color.cpp).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <opencv2/imgproc.hpp>

#include "base/error.h"
#include "yolo/data/augment.h"
#include "yolo/data/mosaic_warp.h"

namespace kestrel::yolo::data {

std::vector<PixelBox> to_pixel_boxes(const std::vector<LabelBox>& boxes, double w, double h,
                                     double padw, double padh) {
  std::vector<PixelBox> out;
  out.reserve(boxes.size());
  for (const LabelBox& b : boxes)
    out.push_back({b.cls, w * (b.x - b.w / 2.0) + padw, h * (b.y - b.h / 2.0) + padh,
                   w * (b.x + b.w / 2.0) + padw, h * (b.y + b.h / 2.0) + padh});
  return out;
}

std::vector<LabelBox> to_normalised_boxes(const std::vector<PixelBox>& boxes, double w, double h,
                                          double eps) {
  std::vector<LabelBox> out;
  out.reserve(boxes.size());
  for (const PixelBox& b : boxes) {
    const double x1 = std::clamp(b.x1, 0.0, w - eps), x2 = std::clamp(b.x2, 0.0, w - eps);
    const double y1 = std::clamp(b.y1, 0.0, h - eps), y2 = std::clamp(b.y2, 0.0, h - eps);
    out.push_back({b.cls, static_cast<float>((x1 + x2) / 2.0 / w),
                   static_cast<float>((y1 + y2) / 2.0 / h), static_cast<float>((x2 - x1) / w),
                   static_cast<float>((y2 - y1) / h)});
  }
  return out;
}

std::vector<PixelBox> mosaic_boxes(const std::array<std::vector<LabelBox>, 4>& labels,
                                   const std::array<cv::Size, 4>& sizes,
                                   const std::array<TilePlacement, 4>& placement, int s) {
  std::vector<PixelBox> out;
  for (int i = 0; i < 4; ++i)
    for (PixelBox b : to_pixel_boxes(labels[i], sizes[i].width, sizes[i].height, placement[i].dx,
                                     placement[i].dy)) {
      b.x1 = std::clamp(b.x1, 0.0, 2.0 * s), b.x2 = std::clamp(b.x2, 0.0, 2.0 * s);
      b.y1 = std::clamp(b.y1, 0.0, 2.0 * s), b.y2 = std::clamp(b.y2, 0.0, 2.0 * s);
      out.push_back(b);
    }
  return out;
}

Mosaic place_mosaic(const std::array<cv::Mat, 4>& tiles,
                    const std::array<std::vector<LabelBox>, 4>& labels, int s, int xc, int yc) {
  std::array<cv::Size, 4> sizes;
  for (int i = 0; i < 4; ++i) {
    KESTREL_CHECK(tiles[i].type() == CV_8UC3, "place_mosaic: tile ", i, " must be 8-bit BGR");
    sizes[i] = tiles[i].size();
  }
  const std::array<TilePlacement, 4> placement = place_tiles(sizes, s, xc, yc);
  Mosaic out;
  out.image = cv::Mat(2 * s, 2 * s, CV_8UC3, cv::Scalar::all(kPadValue));
  for (int i = 0; i < 4; ++i) {
    const TilePlacement& p = placement[i];
    if (p.x2 > p.x1 && p.y2 > p.y1)
      tiles[i](cv::Rect(p.x1 - p.dx, p.y1 - p.dy, p.x2 - p.x1, p.y2 - p.y1))
          .copyTo(out.image(cv::Rect(p.x1, p.y1, p.x2 - p.x1, p.y2 - p.y1)));
  }
  out.boxes = mosaic_boxes(labels, sizes, placement, s);
  return out;
}

PerspectiveParams draw_perspective(Generator& gen, const Hyp& hyp) {
  PerspectiveParams p;
  p.px = gen.uniform(-hyp.perspective, hyp.perspective);
  p.py = gen.uniform(-hyp.perspective, hyp.perspective);
  p.degrees = gen.uniform(-hyp.degrees, hyp.degrees);
  p.scale = gen.uniform(1 - hyp.scale, 1 + hyp.scale);
  p.shear_x = gen.uniform(-hyp.shear, hyp.shear);
  p.shear_y = gen.uniform(-hyp.shear, hyp.shear);
  p.tx = gen.uniform(0.5 - hyp.translate, 0.5 + hyp.translate);
  p.ty = gen.uniform(0.5 - hyp.translate, 0.5 + hyp.translate);
  return p;
}

cv::Matx33d perspective_matrix(const PerspectiveParams& p, int in_w, int in_h, int out_w,
                               int out_h) {
  constexpr double kRad = std::numbers::pi / 180.0;
  // Right to left: centre the input on the origin, perspective, rotate and scale, shear, then
  // move to the (randomly offset) centre of the output.
  const cv::Matx33d C(1, 0, -in_w / 2.0, 0, 1, -in_h / 2.0, 0, 0, 1);
  const cv::Matx33d P(1, 0, 0, 0, 1, 0, p.px, p.py, 1);
  const double a = p.scale * std::cos(p.degrees * kRad), b = p.scale * std::sin(p.degrees * kRad);
  const cv::Matx33d R(a, b, 0, -b, a, 0, 0, 0, 1);  // cv2.getRotationMatrix2D about (0, 0)
  const cv::Matx33d S(1, std::tan(p.shear_x * kRad), 0, std::tan(p.shear_y * kRad), 1, 0, 0, 0, 1);
  const cv::Matx33d T(1, 0, p.tx * out_w, 0, 1, p.ty * out_h, 0, 0, 1);
  return T * S * R * P * C;
}

bool box_candidate(const PixelBox& before, const PixelBox& after, double wh_thr, double ar_thr,
                   double area_thr, double eps) {
  const double w1 = before.x2 - before.x1, h1 = before.y2 - before.y1;
  const double w2 = after.x2 - after.x1, h2 = after.y2 - after.y1;
  const double ar = std::max(w2 / (h2 + eps), h2 / (w2 + eps));
  return w2 > wh_thr && h2 > wh_thr && w2 * h2 / (w1 * h1 + eps) > area_thr && ar < ar_thr;
}

std::vector<PixelBox> warp_boxes(const std::vector<PixelBox>& boxes, const cv::Matx33d& M,
                                 bool projective, double scale, int width, int height) {
  std::vector<PixelBox> out;
  for (const PixelBox& b : boxes) {
    // The new box encloses the four transformed corners, clipped to the output.
    const double cx[4] = {b.x1, b.x2, b.x1, b.x2}, cy[4] = {b.y1, b.y2, b.y2, b.y1};
    double lo_x = INFINITY, lo_y = INFINITY, hi_x = -INFINITY, hi_y = -INFINITY;
    for (int k = 0; k < 4; ++k) {
      const cv::Vec3d q = M * cv::Vec3d(cx[k], cy[k], 1.0);
      const double x = projective ? q[0] / q[2] : q[0], y = projective ? q[1] / q[2] : q[1];
      lo_x = std::min(lo_x, x), hi_x = std::max(hi_x, x);
      lo_y = std::min(lo_y, y), hi_y = std::max(hi_y, y);
    }
    const PixelBox moved{b.cls, std::clamp(lo_x, 0.0, double(width)),
                         std::clamp(lo_y, 0.0, double(height)), std::clamp(hi_x, 0.0, double(width)),
                         std::clamp(hi_y, 0.0, double(height))};
    const PixelBox scaled{b.cls, b.x1 * scale, b.y1 * scale, b.x2 * scale, b.y2 * scale};
    if (box_candidate(scaled, moved)) out.push_back(moved);
  }
  return out;
}

Warped random_perspective(const cv::Mat& image, const std::vector<PixelBox>& boxes,
                          const PerspectiveParams& p, int border) {
  const int width = image.cols + 2 * border, height = image.rows + 2 * border;
  KESTREL_CHECK(width > 0 && height > 0, "random_perspective: border ", border,
                " leaves no image of ", image.cols, "x", image.rows);
  const cv::Matx33d M = perspective_matrix(p, image.cols, image.rows, width, height);
  const bool projective = p.px != 0 || p.py != 0;
  Warped out;
  if (border != 0 || M != cv::Matx33d::eye()) {
    const cv::Scalar grey = cv::Scalar::all(kPadValue);
    if (projective)
      cv::warpPerspective(image, out.image, cv::Mat(M), cv::Size(width, height), cv::INTER_LINEAR,
                          cv::BORDER_CONSTANT, grey);
    else
      cv::warpAffine(image, out.image, cv::Mat(M).rowRange(0, 2), cv::Size(width, height),
                     cv::INTER_LINEAR, cv::BORDER_CONSTANT, grey);
  } else {
    out.image = image;
  }
  out.boxes = warp_boxes(boxes, M, projective, p.scale, width, height);
  return out;
}

Letterboxed letterbox(const cv::Mat& image, int new_h, int new_w, bool auto_pad, bool scaleup,
                      int stride) {
  KESTREL_CHECK(new_h > 0 && new_w > 0 && stride > 0 && !image.empty(),
                "letterbox: needs an image and a positive shape and stride, got ", new_h, "x",
                new_w, " stride ", stride);
  const int h = image.rows, w = image.cols;
  double r = std::min(static_cast<double>(new_h) / h, static_cast<double>(new_w) / w);
  if (!scaleup) r = std::min(r, 1.0);
  // std::nearbyint rounds half to even, like Python's round().
  const int unpad_w = static_cast<int>(std::nearbyint(w * r));
  const int unpad_h = static_cast<int>(std::nearbyint(h * r));
  int dw = new_w - unpad_w, dh = new_h - unpad_h;
  if (auto_pad) dw = ((dw % stride) + stride) % stride, dh = ((dh % stride) + stride) % stride;
  Letterboxed out;
  out.ratio_w = out.ratio_h = r;
  out.pad_w = dw / 2.0;
  out.pad_h = dh / 2.0;
  cv::Mat resized = image;
  if (unpad_w != w || unpad_h != h)
    cv::resize(image, resized, cv::Size(unpad_w, unpad_h), 0, 0, cv::INTER_LINEAR);
  // An odd padding puts the extra pixel bottom/right (the -+0.1 breaks the rounding tie).
  const int top = static_cast<int>(std::nearbyint(out.pad_h - 0.1));
  const int bottom = static_cast<int>(std::nearbyint(out.pad_h + 0.1));
  const int left = static_cast<int>(std::nearbyint(out.pad_w - 0.1));
  const int right = static_cast<int>(std::nearbyint(out.pad_w + 0.1));
  cv::copyMakeBorder(resized, out.image, top, bottom, left, right, cv::BORDER_CONSTANT,
                     cv::Scalar::all(kPadValue));
  return out;
}

}  // namespace kestrel::yolo::data
