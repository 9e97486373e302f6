// Decoded images kept as they are first loaded, shared by every loader thread, up to a byte
// budget: while the budget lasts an image is decoded once, not once per mosaic that uses it (a
// mosaic reads four images, so without a cache an epoch decodes each image about four times).
// Nothing is evicted: the shuffled sampler reads every image equally often, so whichever images
// are kept serve the same share of the loads, and a kept image is never decoded again.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "yolo/data/image_io.h"

namespace kestrel::yolo::data {

class ImageCache {
 public:
  ImageCache(int64_t images, int64_t budget_bytes);

  std::optional<LoadedImage> find(int64_t index) const;
  // Keeps the image when it fits in what is left of the budget (and is not kept yet): shares its
  // pixels when they own their memory, else keeps a copy (a view, or a loader thread's buffer).
  void offer(int64_t index, const LoadedImage& image);

  int64_t budget_bytes() const { return budget_; }
  int64_t bytes() const;
  int64_t images() const;

 private:
  mutable std::mutex mutex_;
  std::vector<LoadedImage> slots_;  // an empty image: not kept
  int64_t budget_ = 0, bytes_ = 0, kept_ = 0;
};

// The default budget of one training process: a quarter of the memory available now, shared by
// the processes of this machine (local_ranks).
int64_t default_image_cache_budget(int local_ranks);
// Bytes the kernel reports as available to new allocations, and the machine's memory (0 when unknown).
int64_t available_memory_bytes();
int64_t total_memory_bytes();
// The reference's check_cache_ram line when --cache ram does not fit (required * 1.1 > available):
// "train: 12.3GB RAM required, 4.5/15.6GB available, not caching images ⚠️" (prefix given).
std::string cache_ram_shortfall_line(const std::string& prefix, int64_t required, int64_t available, int64_t total);

}  // namespace kestrel::yolo::data
