#include "yolo/data/classify_cache.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <opencv2/imgproc.hpp>
#include <regex>

#include "base/error.h"
#include "io/atomic_file.h"

namespace kestrel::yolo::data {

namespace fs = std::filesystem;

ClassifyCacheMode parse_classify_cache(const std::string& value) {
  if (value.empty() || value == "none" || value == "false") return ClassifyCacheMode::None;
  if (value == "ram" || value == "true") return ClassifyCacheMode::Ram;
  if (value == "disk") return ClassifyCacheMode::Disk;
  KESTREL_FAIL("--cache must be ram or disk (or none), got '", value, "'");
}

ClassifyImages::ClassifyImages(std::vector<std::string> paths, ClassifyCacheMode mode)
    : paths_(std::move(paths)), mode_(mode) {
  if (mode_ == ClassifyCacheMode::Ram)
    kept_ = std::make_unique<ImageCache>(size(), std::numeric_limits<int64_t>::max());
  if (mode_ != ClassifyCacheMode::Disk) return;
  std::map<std::string, const std::string*> owner;
  for (const std::string& p : paths_) {
    const auto [at, fresh] = owner.emplace(npy_path_of(p), &p);
    KESTREL_CHECK(fresh || *at->second == p, "--cache disk: ", *at->second, " and ", p, " would share ", at->first,
                  "; rename one of them, or use --cache ram");
  }
}

cv::Mat ClassifyImages::load(int64_t index, DecodeBuffers* buffers) const {
  KESTREL_CHECK(index >= 0 && index < size(), "classification images: index ", index, " outside [0, ", size(), ")");
  const std::string& image_path = paths_[static_cast<size_t>(index)];
  if (kept_)
    if (std::optional<LoadedImage> kept = kept_->find(index)) return kept->image;
  const std::string npy = mode_ == ClassifyCacheMode::Disk ? npy_path_of(image_path) : std::string();
  if (!npy.empty() && fs::exists(npy)) return read_npy_image(npy);
  cv::Mat image;
  try {
    image = buffers && mode_ == ClassifyCacheMode::None ? read_image(image_path, buffers->file, buffers->pixels)
                                                        : read_image(image_path);
  } catch (const Error& e) {
    KESTREL_FAIL(e.what(), "; remove ", image_path, " from the dataset (classification reads its images only ",
                 "when it uses them)");
  }
  if (kept_) kept_->offer(index, {image, image.rows, image.cols});
  if (!npy.empty()) write_npy_image(npy, image);
  return image;
}

}  // namespace kestrel::yolo::data
