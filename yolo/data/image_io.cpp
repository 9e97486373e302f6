#include "yolo/data/image_io.h"

#include <algorithm>
#include <opencv2/imgproc.hpp>

#include "base/error.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {

namespace {

cv::Mat resize_long_side_to(const cv::Mat& image, int img_size, bool augment, PixelBuffer* into) {
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
  // cv::resize keeps a destination that already has the output's size and type.
  cv::Mat out = into ? into->image(h, w, image.type()) : cv::Mat();
  cv::resize(image, out, cv::Size(w, h), 0, 0, interp);
  return out;
}

}  // namespace

cv::Mat resize_long_side(const cv::Mat& image, int img_size, bool augment) {
  return resize_long_side_to(image, img_size, augment, nullptr);
}

cv::Mat resize_long_side(const cv::Mat& image, int img_size, bool augment, PixelBuffer& into) {
  return resize_long_side_to(image, img_size, augment, &into);
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

namespace kestrel::yolo::data {

int64_t LoadBuffers::allocations() const {
  int64_t n = decoded.allocations();
  for (const PixelBuffer& b : slots) n += b.allocations();
  return n;
}

LoadedImage load_image(const std::string& path, int img_size, bool augment, LoadBuffers& buffers,
                       int slot) {
  KESTREL_CHECK(slot >= 0 && slot < LoadBuffers::kSlots, "load_image: slot ", slot,
                " outside [0, ", LoadBuffers::kSlots, ")");
  PixelBuffer& target = buffers.slots[static_cast<size_t>(slot)];
  cv::Mat decoded = read_image(path, buffers.file, buffers.decoded);
  // Files above the pixel buffers' bound are not kept either.
  if (buffers.file.capacity() > PixelBuffer::kMaxKeptBytes) std::vector<uint8_t>().swap(buffers.file);
  LoadedImage out;
  out.h0 = decoded.rows;
  out.w0 = decoded.cols;
  out.image = resize_long_side(decoded, img_size, augment, target);
  // Already at img_size: the decoded buffer becomes the slot's (the slot's old memory is the next
  // decode's), so no copy is made.
  if (out.image.data == decoded.data && decoded.u == nullptr) buffers.decoded.swap(target);
  return out;
}

}  // namespace kestrel::yolo::data
