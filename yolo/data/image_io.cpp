#include "yolo/data/image_io.h"

#include <algorithm>
#include <opencv2/imgproc.hpp>

#include "base/error.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {

cv::Mat resize_long_side(const cv::Mat& image, int img_size, bool augment) {
  KESTREL_CHECK(img_size > 0, "resize_long_side: img_size must be positive, got ", img_size);
  KESTREL_CHECK(!image.empty(), "resize_long_side: empty image");
  const int h0 = image.rows, w0 = image.cols;
  const double r = static_cast<double>(img_size) / std::max(h0, w0);
  if (r == 1.0) return image;
  // Shrinking for evaluation uses INTER_AREA (no aliasing); training and enlarging use the
  // cheaper INTER_LINEAR, as the reference. Sizes truncate like Python's int().
  const int interp = (augment || r > 1.0) ? cv::INTER_LINEAR : cv::INTER_AREA;
  const int w = std::max(1, static_cast<int>(w0 * r));
  const int h = std::max(1, static_cast<int>(h0 * r));
  cv::Mat out;
  cv::resize(image, out, cv::Size(w, h), 0, 0, interp);
  return out;
}

LoadedImage load_image(const std::string& path, int img_size, bool augment) {
  cv::Mat decoded = read_image(path);
  LoadedImage out;
  out.h0 = decoded.rows;
  out.w0 = decoded.cols;
  out.image = resize_long_side(decoded, img_size, augment);
  return out;
}

}  // namespace kestrel::yolo::data
