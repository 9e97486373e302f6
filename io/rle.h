// COCO's run-length encoding of binary masks, as pycocotools' mask API (maskApi.c) writes and
// reads it: what the reference's segment/val.py save_one_json puts in a result's "segmentation"
// ({"size": [h, w], "counts": "<string>"}), and what COCOeval's segm reads back.
//
// - Counts run over the pixels in column-major order (x outer, y inner: pixel (y, x) is the
//   (x * h + y)-th), alternating runs of zeros and ones, starting with zeros (so the first count is
//   0 when the mask's first pixel is set). The counts add up to h * w.
// - The string form (rleToString): count i is written as its difference from count i - 2 for
//   i > 2 (sic: counts 0, 1 and 2 as they are), each value as 5-bit groups, least significant
//   first, in characters '0' + group, with 0x20 set on every group but the last; the last group's
//   0x10 bit carries the sign (two's complement), so a value ends once the bits left are all
//   copies of that sign bit.
// - Area: the ones, the sum of the odd-indexed counts. Bbox (rleToBbox): [x, y, w, h] of the set
//   pixels, from the first and last pixel of each run of ones (a run that goes on into a later
//   column covers the full height).
// - Polygons (rleFrPoly): the vertices scaled by 5 and rounded half up (truncating toward zero),
//   every edge walked pixel by pixel on that fine grid, and each step between fine columns that
//   lands on the centre of a coarse column kept as a boundary crossing at its row (rounded up,
//   clamped to 0..h); the crossings sorted, column-major, are the run boundaries (a crossing
//   repeated cancels). So a pixel is set when its centre is inside the polygon as COCO draws it,
//   points outside the image included.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/json.h"

namespace kestrel::rle {

struct Rle {
  int64_t height = 0, width = 0;
  std::vector<uint32_t> counts;
};

// A mask of height x width pixels, row-major (mask[y * width + x]), each 0 or 1; any other value
// is refused (pycocotools would start a run at it and write a mask COCO cannot read back).
Rle encode(const uint8_t* mask, int64_t height, int64_t width);
// The mask back, row-major, 0 or 1. Counts that do not add up to height * width are refused.
std::vector<uint8_t> decode(const Rle& rle);

// The compressed counts, as pycocotools' encode gives them (bytes; save_one_json decodes them as
// UTF-8, which they are: every character is in '0'..'o').
std::string to_string(const std::vector<uint32_t>& counts);
// Counts from their compressed form; a character outside '0'..'o', a string that ends inside a
// value, or a count outside 0..2^32-1 is refused naming its offset.
std::vector<uint32_t> from_string(std::string_view s);

uint64_t area(const Rle& rle);
struct Bbox {
  double x = 0, y = 0, w = 0, h = 0;
};
// pycocotools' toBbox; all zeros for a mask without set pixels.
Bbox bbox(const Rle& rle);

// frPoly: the polygon of `points` vertices xy = x0, y0, x1, y1, ... (pixels) on an h x w mask.
// Fewer than two vertices give the empty mask (as pycocotools' walk finds no crossing). Vertices
// whose scaled coordinates do not fit an int (pycocotools' arithmetic) are refused.
Rle from_polygon(const double* xy, size_t points, int64_t height, int64_t width);
// frBbox: the box [x, y, w, h] as the polygon of its four corners.
Rle from_box(const Bbox& box, int64_t height, int64_t width);
// rleMerge: the union (or with `intersect` the intersection) of masks of one size; none gives an
// empty 0 x 0 mask, and masks of different sizes give it too (as pycocotools).
Rle merge(const std::vector<Rle>& rles, bool intersect = false);
// rleIou of a detection's and a ground truth's masks: the intersection over the union, or over the
// detection's own area when the ground truth is a crowd region; 0 where their boxes (bbox()) do
// not overlap, -1 where they overlap but the sizes differ. The boxes may be passed when known.
double iou(const Rle& dt, const Rle& gt, bool gt_crowd);
double iou(const Rle& dt, const Rle& gt, bool gt_crowd, const Bbox& dt_box, const Bbox& gt_box);

// As a result's "segmentation": {"size": [h, w], "counts": "<compressed>"}, the members in
// pycocotools' order.
json::Value to_json(const Rle& rle);
// From a "segmentation" object: counts compressed (a string, as results and pycocotools write
// them) or not (an array of integers, as COCO's crowd annotations carry them). Errors name `where`.
Rle from_json(const json::Value& value, const std::string& where);

}  // namespace kestrel::rle
