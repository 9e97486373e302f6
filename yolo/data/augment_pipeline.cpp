#include "yolo/data/augment_pipeline.h"

#include <algorithm>
#include <fstream>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "base/error.h"
#include "engine/thread_pool.h"
#include "yolo/data/rect_batches.h"

namespace kestrel::yolo::data {

namespace {

// Bytes the kernel reports as available to new allocations (0 when unknown).
int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

Generator sample_generator(uint64_t seed, int rank, int64_t epoch, int64_t index) {
  KESTREL_CHECK(rank >= 0 && epoch >= 0 && index >= 0 && index < (int64_t{1} << 32),
                "sample_generator: needs rank, epoch >= 0 and 0 <= index < 2^32, got rank ", rank,
                ", epoch ", epoch, ", index ", index);
  return Generator(seed + 1 + static_cast<uint64_t>(rank),
                   (static_cast<uint64_t>(epoch) << 32) + static_cast<uint64_t>(index));
}

AugmentPipeline::AugmentPipeline(std::vector<ImageRecord> records, PipelineOptions options)
    : records_(std::move(records)), options_(std::move(options)) {
  const PipelineOptions& o = options_;
  KESTREL_CHECK(o.stride > 0 && o.img_size > 0 && o.img_size % o.stride == 0,
                "data pipeline: image size ", o.img_size, " must be a positive multiple of the ",
                "model stride ", o.stride, "; round --img-size up to one");
  KESTREL_CHECK(o.batch_size > 0, "data pipeline: batch size must be positive, got ",
                o.batch_size);
  KESTREL_CHECK(!records_.empty(), "data pipeline: the dataset has no usable images");
  if (o.rect) {
    std::vector<std::array<int, 2>> wh;
    for (const ImageRecord& r : records_) wh.push_back({r.width, r.height});
    RectBatches rb = rect_batches(wh, o.batch_size, o.img_size, o.stride, o.pad);
    std::vector<ImageRecord> sorted;
    sorted.reserve(records_.size());
    for (int64_t i : rb.order) sorted.push_back(std::move(records_[i]));
    records_ = std::move(sorted);
    batch_shapes_ = std::move(rb.shapes);
  }
}

const ImageRecord& AugmentPipeline::record(int64_t index) const {
  KESTREL_CHECK(index >= 0 && index < size(), "data pipeline: index ", index,
                " outside the dataset of ", size(), " images");
  return records_[index];
}

int64_t AugmentPipeline::cache_bytes() const {
  int64_t bytes = 0;
  const double s = options_.img_size;
  for (const ImageRecord& r : records_) {
    if (r.width <= 0 || r.height <= 0) {  // size unknown: assume a full square
      bytes += static_cast<int64_t>(3 * s * s);
      continue;
    }
    const double k = s / std::max(r.width, r.height);
    bytes += int64_t{3} * static_cast<int64_t>(r.width * k) * static_cast<int64_t>(r.height * k);
  }
  return bytes;
}

bool AugmentPipeline::cache_images(int threads) {
  const int64_t available = available_memory_bytes();
  if (available > 0 && static_cast<double>(cache_bytes()) * 1.1 > static_cast<double>(available))
    return false;
  std::vector<LoadedImage> images(records_.size());
  ThreadPool pool(static_cast<size_t>(std::max(1, threads)));
  pool.parallel_for(0, size(), [&](int64_t i) {
    images[i] = load_image(records_[i].image_path, options_.img_size, options_.augment);
  });
  cache_ = std::move(images);
  return true;
}

LoadedImage AugmentPipeline::load(int64_t index) const {
  const ImageRecord& r = record(index);
  if (!cache_.empty()) return cache_[index];
  return load_image(r.image_path, options_.img_size, options_.augment);
}

AugmentPipeline::Canvas AugmentPipeline::load_mosaic(int64_t index, Generator& gen,
                                                     const std::vector<int64_t>& partners) const {
  const int s = options_.img_size;
  const int border = -s / 2;  // img_size is a multiple of the stride, hence even
  // Centre uniform in [s/2, 3s/2) (y drawn first, as the reference), then three partners drawn
  // with replacement, and the four shuffled (Fisher-Yates from the back, like random.shuffle).
  const int yc = static_cast<int>(gen.uniform(-border, 2 * s + border));
  const int xc = static_cast<int>(gen.uniform(-border, 2 * s + border));
  std::array<int64_t, 4> picks{index, 0, 0, 0};
  for (int k = 1; k < 4; ++k)
    picks[k] = partners.empty() ? static_cast<int64_t>(gen.randint(size()))
                                : partners[gen.randint(partners.size())];
  for (int k = 3; k > 0; --k) std::swap(picks[k], picks[gen.randint(k + 1)]);
  std::array<cv::Mat, 4> tiles;
  std::array<std::vector<LabelBox>, 4> labels;
  for (int k = 0; k < 4; ++k) {
    tiles[k] = load(picks[k]).image;
    labels[k] = records_[picks[k]].boxes;
  }
  Mosaic m = place_mosaic(tiles, labels, s, xc, yc);
  // copy_paste needs segments, which these labels do not have: like the reference without
  // segments, it changes nothing, so it is not applied.
  Warped w = random_perspective(m.image, m.boxes, draw_perspective(gen, options_.hyp), border);
  return {std::move(w.image), std::move(w.boxes)};
}

Sample AugmentPipeline::get(int64_t index, Generator& gen, const std::vector<int64_t>& partners) const {
  const ImageRecord& rec = record(index);
  const Hyp& hyp = options_.hyp;
  Sample out;
  out.path = rec.image_path;
  try {
    cv::Mat img;
    std::vector<PixelBox> boxes;
    const bool mosaic = options_.augment && !options_.rect && gen.uniform() < hyp.mosaic;
    if (mosaic) {
      Canvas c = load_mosaic(index, gen, partners);
      if (gen.uniform() < hyp.mixup) {
        // The reference's mixup partner: random.randint(0, n - 1), any image; its mosaic's
        // partners come from the same pool as the first's.
        Canvas other = load_mosaic(static_cast<int64_t>(gen.randint(size())), gen, partners);
        c.image = blend(c.image, other.image, sample_beta(gen, 32.0, 32.0));
        c.boxes.insert(c.boxes.end(), other.boxes.begin(), other.boxes.end());
      }
      img = std::move(c.image);
      boxes = std::move(c.boxes);
    } else {
      LoadedImage li = load(index);
      const int h = li.image.rows, w = li.image.cols;
      const std::array<int, 2> shape =
          options_.rect ? batch_shapes_[index / options_.batch_size]
                        : std::array<int, 2>{options_.img_size, options_.img_size};
      Letterboxed lb = letterbox(li.image, shape[0], shape[1], false, options_.augment,
                                 options_.stride);
      out.has_shapes = true;
      out.shapes = {li.h0, li.w0, double(h) / li.h0, double(w) / li.w0, lb.pad_w, lb.pad_h};
      boxes = to_pixel_boxes(rec.boxes, lb.ratio_w * w, lb.ratio_h * h, lb.pad_w, lb.pad_h);
      img = std::move(lb.image);
      if (options_.augment) {
        Warped wp = random_perspective(img, boxes, draw_perspective(gen, hyp), 0);
        img = std::move(wp.image);
        boxes = std::move(wp.boxes);
      }
    }
    out.labels = to_normalised_boxes(boxes, img.cols, img.rows);
    if (options_.augment) {
      augment_hsv(img, hyp.hsv_h, hyp.hsv_s, hyp.hsv_v, gen);
      if (gen.uniform() < hyp.flipud) flip_ud(img, out.labels);
      if (gen.uniform() < hyp.fliplr) flip_lr(img, out.labels);
    }
    cv::cvtColor(img, out.image, cv::COLOR_BGR2RGB);  // the network's channel order
  } catch (const std::exception& e) {
    // A mosaic reads other images too: the inner message names the file that failed.
    KESTREL_FAIL("data pipeline: sample ", index, " (", rec.image_path, "): ", e.what());
  }
  return out;
}

}  // namespace kestrel::yolo::data
