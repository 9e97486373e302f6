#include "yolo/data/seg_augment.h"

#include <algorithm>
#include <opencv2/imgproc.hpp>

#include "base/error.h"

namespace kestrel::yolo::data {

WarpedSegments warp_segments(const std::vector<PixelBox>& boxes,
                             const std::vector<PixelSegment>& segments, const cv::Matx33d& M,
                             bool projective, double scale, int width, int height) {
  KESTREL_CHECK(boxes.size() == segments.size(), "warp_segments: ", boxes.size(), " boxes but ",
                segments.size(), " segments; each instance needs both");
  WarpedSegments out;
  for (size_t i = 0; i < boxes.size(); ++i) {
    PixelSegment moved = resample_segment(segments[i]);
    for (cv::Point2d& p : moved) {
      // Row (x, y, 1) times M transposed, as the reference's xy @ M.T.
      const double x = M(0, 0) * p.x + M(0, 1) * p.y + M(0, 2);
      const double y = M(1, 0) * p.x + M(1, 1) * p.y + M(1, 2);
      if (projective) {
        const double w = M(2, 0) * p.x + M(2, 1) * p.y + M(2, 2);
        p = {x / w, y / w};
      } else {
        p = {x, y};
      }
    }
    const auto box = segment_to_box(moved, width, height);
    const PixelBox& b = boxes[i];
    const PixelBox after{b.cls, box[0], box[1], box[2], box[3]};
    const PixelBox before{b.cls, b.x1 * scale, b.y1 * scale, b.x2 * scale, b.y2 * scale};
    if (!box_candidate(before, after, 2, 100, 0.01)) continue;
    out.boxes.push_back(after);
    out.segments.push_back(std::move(moved));
  }
  return out;
}

namespace {

// The reference's bbox_ioa: intersection over the area of `other`.
double intersection_over_other(const PixelBox& box, const PixelBox& other) {
  const double iw = std::max(0.0, std::min(box.x2, other.x2) - std::max(box.x1, other.x1));
  const double ih = std::max(0.0, std::min(box.y2, other.y2) - std::max(box.y1, other.y1));
  return iw * ih / ((other.x2 - other.x1) * (other.y2 - other.y1) + 1e-7);
}

}  // namespace

void copy_paste(cv::Mat& image, std::vector<PixelBox>& boxes, std::vector<PixelSegment>& segments,
                const std::vector<int64_t>& picks) {
  KESTREL_CHECK(boxes.size() == segments.size(), "copy_paste: ", boxes.size(), " boxes but ",
                segments.size(), " segments; each instance needs both");
  if (picks.empty()) return;
  const int w = image.cols;
  cv::Mat pasted = cv::Mat::zeros(image.size(), CV_8U);
  for (int64_t j : picks) {
    KESTREL_CHECK(j >= 0 && j < static_cast<int64_t>(boxes.size()), "copy_paste: instance ", j,
                  " of ", boxes.size());
    const PixelBox l = boxes[j];
    const PixelBox mirrored{l.cls, w - l.x2, l.y1, w - l.x1, l.y2};
    if (!std::all_of(boxes.begin(), boxes.end(),
                     [&](const PixelBox& b) { return intersection_over_other(mirrored, b) < 0.30; }))
      continue;
    PixelSegment flipped = segments[j];
    for (cv::Point2d& p : flipped) p.x = static_cast<float>(w - p.x);  // float32, as the reference's
    std::vector<cv::Point> points;
    points.reserve(segments[j].size());
    for (const cv::Point2d& p : segments[j]) points.emplace_back(static_cast<int>(p.x), static_cast<int>(p.y));
    boxes.push_back(mirrored);
    segments.push_back(std::move(flipped));
    if (!points.empty()) cv::fillPoly(pasted, std::vector<std::vector<cv::Point>>{points}, cv::Scalar(1));
  }
  cv::Mat mirrored_image, where;
  cv::flip(image, mirrored_image, 1);
  cv::flip(pasted, where, 1);
  mirrored_image.copyTo(image, where);
}

void flip_segments_lr(std::vector<PixelSegment>& segments, double width) {
  for (PixelSegment& s : segments)
    for (cv::Point2d& p : s) p.x = width - p.x;
}

void flip_segments_ud(std::vector<PixelSegment>& segments, double height) {
  for (PixelSegment& s : segments)
    for (cv::Point2d& p : s) p.y = height - p.y;
}

void flip_masks_lr(std::vector<cv::Mat>& masks) {
  for (cv::Mat& m : masks) cv::flip(m, m, 1);
}

void flip_masks_ud(std::vector<cv::Mat>& masks) {
  for (cv::Mat& m : masks) cv::flip(m, m, 0);
}

}  // namespace kestrel::yolo::data
