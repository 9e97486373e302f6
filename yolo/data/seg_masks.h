// Polygons to instance masks, as the reference's polygon2mask, polygons2masks and
// polygons2masks_overlap (v7.0 utils/segment/dataloaders.py). Masks are single-channel cv::Mat,
// (height / ratio) x (width / ratio): CV_8U for one mask per instance; the overlap image is CV_8U
// holding 1-based instance numbers, or CV_32S when there are more than 255 instances (as the
// reference switches to int32).
#pragma once
#include <cstdint>
#include <opencv2/core.hpp>
#include <vector>

#include "yolo/data/seg_labels.h"

namespace kestrel::yolo::data {

// polygon2mask: the polygon's points truncated to int (astype(np.int32)), filled with `color` on a
// zero height x width image (cv::fillPoly, 8-connected, no shift), then resized to
// (height / downsample_ratio) x (width / downsample_ratio) (integer division) with bilinear
// interpolation, cv2.resize's default. downsample_ratio must be >= 1. An empty polygon gives an
// all-zero mask.
cv::Mat polygon_to_mask(int height, int width, const PixelSegment& polygon, int color = 1,
                        int downsample_ratio = 1);

// polygons2masks: one polygon_to_mask per instance, in the order given.
std::vector<cv::Mat> polygons_to_masks(int height, int width,
                                       const std::vector<PixelSegment>& polygons, int color = 1,
                                       int downsample_ratio = 1);

// polygons2masks_overlap: every instance's mask (colour 1) drawn into one image, largest area
// (pixels of its downsampled mask) first, so a smaller instance covers a larger one where they
// overlap; a pixel holds k + 1 for the k-th instance in that order, 0 for none. `order[k]` is
// the index (into `polygons`) of the k-th instance: the reference's np.argsort(-areas), numpy
// 1.24's unstable introsort (numpy_argsort.h) including its order among equal areas, and
// including its uint64 wrap-around that puts zero-area instances first. With at most 255
// instances the image is uint8 and each step wraps modulo 256 before the clip, as the reference's
// uint8 arithmetic does (only visible past 127 overlapping instances).
struct OverlapMasks {
  cv::Mat mask;                // CV_8U, or CV_32S past 255 instances
  std::vector<int64_t> order;  // sorted position -> instance index
};
OverlapMasks polygons_to_masks_overlap(int height, int width,
                                       const std::vector<PixelSegment>& polygons,
                                       int downsample_ratio = 1);

}  // namespace kestrel::yolo::data
