// The classifier's example grids, as the reference's imshow_cls draws them: up to 25 images of a
// normalised batch (denormalised back to RGB), min(8, round(sqrt(n))) to a row, each titled with
// its class ("name", or "true—predicted" when predictions are given): train_images.jpg and
// test_images.jpg.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo {

// images: float32 (B, h, w, 3) NHWC RGB normalised with ImageNet's mean and std, on the host.
void plot_classify_images(const Tensor& images, const std::vector<int64_t>& labels,
                          const std::vector<int64_t>& predicted, const std::vector<std::string>& names,
                          const std::string& path);

}  // namespace kestrel::yolo
