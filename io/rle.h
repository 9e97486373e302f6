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

// As a result's "segmentation": {"size": [h, w], "counts": "<compressed>"}, the members in
// pycocotools' order.
json::Value to_json(const Rle& rle);
// From a "segmentation" object: counts compressed (a string, as results and pycocotools write
// them) or not (an array of integers, as COCO's crowd annotations carry them). Errors name `where`.
Rle from_json(const json::Value& value, const std::string& where);

}  // namespace kestrel::rle
