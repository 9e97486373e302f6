#include "yolo/data/image_cache.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"

namespace kestrel::yolo::data {

ImageCache::ImageCache(int64_t images, int64_t budget_bytes) : budget_(budget_bytes) {
  KESTREL_CHECK(images >= 0 && budget_bytes >= 0, "image cache: needs sizes >= 0, got ", images,
                " images and ", budget_bytes, " bytes");
  slots_.resize(static_cast<size_t>(images));
}

std::optional<LoadedImage> ImageCache::find(int64_t index) const {
  std::lock_guard lock(mutex_);
  const LoadedImage& slot = slots_.at(static_cast<size_t>(index));
  if (slot.image.empty()) return std::nullopt;
  return slot;  // shares the pixels (cv::Mat counts references); nobody writes to them
}

void ImageCache::offer(int64_t index, const LoadedImage& image) {
  const int64_t size = static_cast<int64_t>(image.image.total() * image.image.elemSize());
  std::lock_guard lock(mutex_);
  LoadedImage& slot = slots_.at(static_cast<size_t>(index));
  if (!slot.image.empty() || bytes_ + size > budget_) return;
  // A copy of its own unless the pixels are a whole image that owns (counts references to) its
  // memory: they may be a view of something larger, or of a loader thread's reused buffer
  // (LoadBuffers), which the thread's next image overwrites.
  const bool own = image.image.isContinuous() && image.image.u != nullptr;
  slot = {own ? image.image : image.image.clone(), image.h0, image.w0};
  bytes_ += size;
  ++kept_;
}

int64_t ImageCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

int64_t ImageCache::images() const {
  std::lock_guard lock(mutex_);
  return kept_;
}

namespace {

int64_t meminfo_bytes(const std::string& field) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == field) return kib * 1024;
  }
  return 0;
}

}  // namespace

int64_t available_memory_bytes() { return meminfo_bytes("MemAvailable:"); }
int64_t total_memory_bytes() { return meminfo_bytes("MemTotal:"); }

std::string cache_ram_shortfall_line(const std::string& prefix, int64_t required, int64_t available, int64_t total) {
  const double gb = 1 << 30;
  char text[160];
  std::snprintf(text, sizeof text, "%.1fGB RAM required, %.1f/%.1fGB available, not caching images \u26a0\ufe0f",
                required / gb, available / gb, total / gb);
  return prefix + text;
}

int64_t default_image_cache_budget(int local_ranks) {
  return available_memory_bytes() / 4 / std::max(local_ranks, 1);
}

}  // namespace kestrel::yolo::data
