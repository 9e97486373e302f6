// Where a classification sample's pixels come from, by --cache, as the reference's
// ClassificationDataset takes them:
//   none  decoded from the image file every time it is used
//   ram   decoded once, then kept (shared by every loader thread; the reference keeps a copy per
//         worker process)
//   disk  an .npy file beside the image (the image's path with its extension replaced, as
//         Path.with_suffix('.npy')), written once from the decoded image and read afterwards;
//         files the reference wrote are read too
// Images are BGR, 8-bit, 3 channels, as cv2.imread gives them.
#pragma once
#include <cstdint>
#include <memory>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "yolo/data/image_cache.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/npy_image.h"

namespace kestrel::yolo::data {

enum class ClassifyCacheMode { None, Ram, Disk };

// --cache's value: "" or "none", "ram" (also "true", the bare flag's value), "disk"; anything else
// is an error naming the choices.
ClassifyCacheMode parse_classify_cache(const std::string& value);

// One loader thread's reused memory for decoding (not thread-safe: one per thread).
struct DecodeBuffers {
  std::vector<uint8_t> file;
  PixelBuffer pixels;
};

class ClassifyImages {
 public:
  // With Disk, two images that share an .npy path (a.jpg and a.png) are an error naming both.
  ClassifyImages(std::vector<std::string> paths, ClassifyCacheMode mode);

  int64_t size() const { return static_cast<int64_t>(paths_.size()); }
  ClassifyCacheMode mode() const { return mode_; }
  const std::string& path(int64_t index) const { return paths_.at(static_cast<size_t>(index)); }

  // Image `index`, BGR. With `buffers` (mode None) the result may be a view of their memory, valid
  // until their next use. A file that cannot be decoded is an error naming it and saying to remove
  // it from the dataset. Thread-safe.
  cv::Mat load(int64_t index, DecodeBuffers* buffers = nullptr) const;

 private:
  std::vector<std::string> paths_;
  ClassifyCacheMode mode_;
  std::unique_ptr<ImageCache> kept_;  // Ram: every image, no budget
};

}  // namespace kestrel::yolo::data
