// A small classification dataset in the ImageNet folder layout, written for a test:
// <dir>/train/<class>/<i>.jpg and <dir>/val/<class>/<i>.jpg, flat-coloured noisy images (class c
// strongest in channel c % 3), sizes varying a little from image to image.
#pragma once
#include <opencv2/core.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "yolo/data/image_codec.h"

namespace kestrel::testing {

inline void make_classify_folder(const std::filesystem::path& dir, const std::vector<std::string>& classes, int train_per_class,
                          int val_per_class) {
  cv::RNG rng(7);
  for (size_t c = 0; c < classes.size(); ++c)
    for (const char* split : {"train", "val"}) {
      const std::filesystem::path folder = dir / split / classes[c];
      std::filesystem::create_directories(folder);
      const int n = std::string(split) == "train" ? train_per_class : val_per_class;
      for (int i = 0; i < n; ++i) {
        cv::Scalar colour(30, 30, 30);
        colour[static_cast<int>(c % 3)] = 200;
        cv::Mat image(40 + 4 * (i % 5), 48, CV_8UC3, colour);
        cv::Mat noise(image.size(), CV_8UC3);
        rng.fill(noise, cv::RNG::UNIFORM, 0, 40);
        image += noise;
        yolo::data::write_jpeg((folder / (std::to_string(i) + ".jpg")).string(), image);
      }
    }
}


}  // namespace kestrel::testing
