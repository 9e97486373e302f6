// Rectangular batches (the reference's rect=True, used by val and `train --rect`): images sorted
// by aspect ratio h / w with numpy's default argsort, exactly as the reference orders them (ties
// included: yolo/data/numpy_argsort.h), cut into batches in that order, and one letterbox shape
// per batch: the shape of aspect ratio [max, 1] when every image of the batch is wider than tall,
// [1, 1 / min] when every one is taller than wide, else square, each side
// ceil(side * img_size / stride + pad) * stride.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace kestrel::yolo::data {

struct RectBatches {
  std::vector<int64_t> order;              // order[i] = input image at sorted position i
  std::vector<std::array<int, 2>> shapes;  // per batch: (height, width)
};

// wh: each image's (width, height), in the dataset's order (sorted paths, as the reference).
RectBatches rect_batches(const std::vector<std::array<int, 2>>& wh, int batch_size, int img_size,
                         int stride, double pad);

}  // namespace kestrel::yolo::data
