#include "yolo/data/seg_augment.h"

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
