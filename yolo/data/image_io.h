// Loading images for the augmentation pipeline: decode (image_codec.h: libjpeg-turbo/libpng, EXIF
// orientation applied, BGR) and the reference's load_image resize (long side to img_size, aspect
// kept, interpolation chosen as the reference does).
#pragma once
#include <array>
#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {

// The reference's load_image resize: ratio r = img_size / max(h, w); when r != 1 the image goes
// to (int(w * r), int(h * r)), interpolated INTER_LINEAR when augmenting or enlarging and
// INTER_AREA when shrinking for evaluation. The input is returned unchanged (shared) when r == 1.
cv::Mat resize_long_side(const cv::Mat& image, int img_size, bool augment);
// The same, resized into `into`'s memory (when it resizes).
cv::Mat resize_long_side(const cv::Mat& image, int img_size, bool augment, PixelBuffer& into);

// An image as the pipeline loads it: resized, with its size before resizing.
struct LoadedImage {
  cv::Mat image;       // BGR, long side img_size
  int h0 = 0, w0 = 0;  // as decoded (after EXIF orientation)
};

// read_image (image_codec.h; errors name the file) then resize_long_side.
LoadedImage load_image(const std::string& path, int img_size, bool augment);

// The memory one loader thread keeps for loading images (not thread-safe: one per thread): the
// file's bytes, the decoded image and one image per slot (kSlots, a mosaic's four tiles), each
// grown to the largest image it has held (PixelBuffer: at most kMaxKeptBytes each, larger images
// get memory of their own).
struct LoadBuffers {
  static constexpr int kSlots = 4;
  std::vector<uint8_t> file;
  PixelBuffer decoded;
  std::array<PixelBuffer, kSlots> slots;
  // How often any of the pixel buffers took new memory.
  int64_t allocations() const;
};

// load_image into `buffers`: the image is a view of buffers.slots[slot] (or of memory of its own
// for an image above PixelBuffer::kMaxKeptBytes or one the EXIF orientation turned), valid until
// the next load into that slot. The same pixels as load_image. A keeper must clone it.
LoadedImage load_image(const std::string& path, int img_size, bool augment, LoadBuffers& buffers,
                       int slot);

}  // namespace kestrel::yolo::data
