// What the dataset scan hands the augmentation pipeline: one record per usable image.
#pragma once
#include <string>
#include <vector>

namespace kestrel::yolo::data {

// One object: class and box centre/size normalised to the image's width and height (YOLO format).
struct LabelBox {
  int cls = 0;
  float x = 0, y = 0, w = 0, h = 0;
  bool operator==(const LabelBox&) const = default;
};

struct ImageRecord {
  std::string image_path;
  int width = 0, height = 0;  // as stored, after EXIF orientation
  std::vector<LabelBox> boxes;
  // Instance segmentation only: one polygon per box (x1 y1 x2 y2 ..., normalised, float32 as the
  // reference reads them), or none when the labels are plain boxes or the task is detection.
  std::vector<std::vector<float>> segments{};
};

}  // namespace kestrel::yolo::data
