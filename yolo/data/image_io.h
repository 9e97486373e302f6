// Loading images for the augmentation pipeline: decode (image_codec.h: libjpeg-turbo/libpng, EXIF
// orientation applied, BGR) and the reference's load_image resize (long side to img_size, aspect
// kept, interpolation chosen as the reference does).
#pragma once
#include <opencv2/core.hpp>
#include <string>

namespace kestrel::yolo::data {

// The reference's load_image resize: ratio r = img_size / max(h, w); when r != 1 the image goes
// to (int(w * r), int(h * r)), interpolated INTER_LINEAR when augmenting or enlarging and
// INTER_AREA when shrinking for evaluation. The input is returned unchanged (shared) when r == 1.
cv::Mat resize_long_side(const cv::Mat& image, int img_size, bool augment);

// An image as the pipeline loads it: resized, with its size before resizing.
struct LoadedImage {
  cv::Mat image;       // BGR, long side img_size
  int h0 = 0, w0 = 0;  // as decoded (after EXIF orientation)
};

// read_image (image_codec.h; errors name the file) then resize_long_side.
LoadedImage load_image(const std::string& path, int img_size, bool augment);

}  // namespace kestrel::yolo::data
