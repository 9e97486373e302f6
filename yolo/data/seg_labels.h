// Polygon labels for instance segmentation, as the reference's verify_image_label reads them
// (v7.0 utils/dataloaders.py, the segment branch) and its polygon helpers (utils/general.py:
// segments2boxes, resample_segments, segment2box). Pure functions: no files are opened except by
// verify_image_segments, which wraps detection's verify_image_label (label_scan.h).
#pragma once
#include <array>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "yolo/data/label_scan.h"
#include "yolo/data/records.h"

namespace kestrel::yolo::data {

// One polygon in pixels (or any unit), its points in order; the last point joins the first.
using PixelSegment = std::vector<cv::Point2d>;

// The rows of one label file with their polygons. As the reference, when any row has more than 6
// values every row is a polygon "class x1 y1 x2 y2 ..." (normalised) and its box is the polygon's
// min/max (segments2boxes); otherwise rows are boxes "class x y w h" and `segments` is empty.
// Checks, messages and duplicate removal are detection's parse_labels (label_scan.h), so the
// boxes are exactly parse_labels' boxes: an odd coordinate count, a box (centre and size, as the
// reference checks them after segments2boxes, so a point itself may lie a little outside) outside
// [0, 1], a negative or non-integer class, a class >= class_limit (when > 0) or a zero-width/height
// box refuse the file with `error` naming the row. Rows whose box repeats an earlier row's (class
// and box equal, as the reference's np.unique compares them) are dropped with their polygon and
// counted; the first of each repeat is kept in file order (the reference reorders the rows by
// np.unique's sort when there are duplicates; Kestrel keeps file order, as detection does).
struct ParsedSegLabels {
  std::vector<LabelBox> boxes;
  // One per box when the file holds polygons (else empty): x1 y1 x2 y2 ..., normalised, float32
  // as the reference reads them.
  std::vector<std::vector<float>> segments;
  int duplicates = 0;
  std::string error;  // non-empty: the file is refused (boxes and segments empty)
};
ParsedSegLabels parse_segment_labels(std::string_view text, int class_limit);

// verify_image_label for a segmentation dataset: detection's check of the image and its labels
// (counts and warnings unchanged), plus the polygons of the kept rows. `segments` is empty when
// the pair is unusable, the labels are boxes, or there are none.
struct SegPairCheck {
  PairCheck check;
  std::vector<std::vector<float>> segments;  // one per check.record.boxes entry, or none
};
SegPairCheck verify_image_segments(const std::string& image_path, const std::string& label_path,
                                   int class_limit);

// The reference's resample_segments for one polygon: the closed polygon (first point appended)
// interpolated at n points evenly spaced in point index (np.linspace(0, len, n) through np.interp),
// so the first and last output points are the first input point. Doubles, as np.interp returns.
// An empty polygon stays empty.
PixelSegment resample_segment(const PixelSegment& points, int n = 1000);

// The reference's segment2box: the min/max (x1, y1, x2, y2) of the points inside
// [0, width] x [0, height]; all zeros when no inside point has x != 0 (its `if any(x)` test).
std::array<double, 4> segment_to_box(const PixelSegment& points, double width, double height);

// Normalised polygon (x1 y1 x2 y2 ...) to pixels: x * w + padw, y * h + padh, in float32 as the
// reference's xyn2xy computes it on float32 labels.
PixelSegment segment_to_pixels(const std::vector<float>& normalised, double w, double h,
                               double padw = 0, double padh = 0);

}  // namespace kestrel::yolo::data
