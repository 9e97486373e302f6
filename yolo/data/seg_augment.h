// The segmentation side of the reference's augmentations (v7.0 utils/segment/augmentations.py
// random_perspective, and the flips of utils/segment/dataloaders.py): polygons move with the
// image and the boxes come from the moved polygons. The image itself is warped by detection's
// code (augment.h) with the same matrix (perspective_matrix).
#pragma once
#include <opencv2/core.hpp>
#include <vector>

#include "yolo/data/augment.h"
#include "yolo/data/seg_labels.h"

namespace kestrel::yolo::data {

// random_perspective's labels for segments: every polygon resampled to 1000 points
// (resample_segment), each point through M (divided by its w when projective), the box is
// segment_to_box of the moved points inside width x height (no further clip, as the reference),
// and an instance is kept when box_candidate(its input box scaled by `scale`, the new box,
// wh_thr 2, ar_thr 100, area_thr 0.01) accepts it. `boxes` and `segments` pair up one to one
// (pixels of the input); the kept boxes keep their class. Kept polygons keep all 1000 points,
// inside the image or not.
struct WarpedSegments {
  std::vector<PixelBox> boxes;
  std::vector<PixelSegment> segments;
};
WarpedSegments warp_segments(const std::vector<PixelBox>& boxes,
                             const std::vector<PixelSegment>& segments, const cv::Matx33d& M,
                             bool projective, double scale, int width, int height);

// The reference's copy_paste (utils/augmentations.py) on a mosaic canvas: for each instance j of
// `picks` in turn (random.sample's draw of round(p * n) of the n instances), its left-right mirror
// (box x -> width - x, polygon too) is added as a new instance when it covers less than 30% of
// every instance's box so far (bbox_ioa, area of the other box, eps 1e-7); the image then takes
// the mirrored pixels inside the added instances' mirrored polygons (each original polygon's
// points truncated to int and filled, as cv2.drawContours(FILLED) draws them). `boxes` and
// `segments` pair up one to one.
void copy_paste(cv::Mat& image, std::vector<PixelBox>& boxes, std::vector<PixelSegment>& segments,
                const std::vector<int64_t>& picks);

// Polygons mirrored in an image `width` (or `height`) pixels across: x -> width - x (y ->
// height - y), as flip_lr / flip_ud mirror normalised boxes.
void flip_segments_lr(std::vector<PixelSegment>& segments, double width);
void flip_segments_ud(std::vector<PixelSegment>& segments, double height);

// Masks (per instance, or the one overlap image) mirrored in place, as the reference's
// torch.flip of its mask tensor: left-right flips columns, up-down rows.
void flip_masks_lr(std::vector<cv::Mat>& masks);
void flip_masks_ud(std::vector<cv::Mat>& masks);

}  // namespace kestrel::yolo::data
