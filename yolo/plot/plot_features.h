// `detect --visualize`, as the reference's feature_visualization (utils/plots.py): for a stage's
// output, the first min(32, channels) channel maps of the batch's first image in a grid of 8 per
// row (each channel scaled from its own minimum to maximum, matplotlib's viridis colours), saved as
// stage{i}_{Type}_features.png, and the whole first image's output as a float32 (C, H, W) .npy
// beside it. Outputs 1 pixel high or wide are skipped, as there.
#pragma once
#include <opencv2/core.hpp>

#include <string>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo {

// x: NHWC activations on any device. module_type: the reference's dotted name
// (models.common.Conv); its last part names the files. Returns the PNG's path, "" when skipped.
std::string save_feature_maps(const Tensor& x, const std::string& module_type, int stage, const std::string& dir);

// A float32 array as numpy's np.save writes it (format 1.0, little-endian, C order).
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& values);

}  // namespace kestrel::yolo
