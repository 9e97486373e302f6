#include "yolo/data/augment_pipeline.h"

#include <cstdio>

#include <algorithm>
#include <filesystem>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "base/error.h"
#include "engine/thread_pool.h"
#include "yolo/data/npy_image.h"
#include "yolo/data/rect_batches.h"

namespace kestrel::yolo::data {

Generator sample_generator(uint64_t seed, int rank, int64_t epoch, int64_t index) {
  KESTREL_CHECK(rank >= 0 && epoch >= 0 && index >= 0 && index < (int64_t{1} << 32),
                "sample_generator: needs rank, epoch >= 0 and 0 <= index < 2^32, got rank ", rank,
                ", epoch ", epoch, ", index ", index);
  return Generator(seed + 1 + static_cast<uint64_t>(rank),
                   (static_cast<uint64_t>(epoch) << 32) + static_cast<uint64_t>(index));
}

FinishDraws draw_finish(Generator& gen, const Hyp& hyp, bool augment) {
  FinishDraws d;
  if (augment) {
    d.hsv = draw_hsv_gains(gen, hyp.hsv_h, hyp.hsv_s, hyp.hsv_v);
    d.flip_ud = gen.uniform() < hyp.flipud;
    d.flip_lr = gen.uniform() < hyp.fliplr;
  }
  return d;
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

int64_t AugmentPipeline::cache_to_disk(int threads) {
  std::vector<int64_t> bytes(records_.size(), 0);
  ThreadPool pool(static_cast<size_t>(std::max(1, threads)));
  pool.parallel_for(0, size(), [&](int64_t i) {
    const std::string& image = records_[i].image_path;
    const std::string npy = npy_path_of(image);
    std::error_code ec;
    if (!std::filesystem::exists(npy, ec)) {
      try {
        write_npy_image(npy, read_image(image));
      } catch (const Error& e) {
        KESTREL_FAIL("--cache disk saves each decoded image as an .npy file beside it, but ", npy, " cannot be ",
                     "written (", e.what(), "); make the folder writable, or use --cache ram or no --cache");
      }
    }
    bytes[i] = static_cast<int64_t>(std::filesystem::file_size(npy, ec));
  });
  npy_ = true;
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  return total;
}

void AugmentPipeline::keep_decoded_images(int64_t budget_bytes) {
  decoded_ = budget_bytes > 0 ? std::make_unique<ImageCache>(size(), budget_bytes) : nullptr;
}

LoadedImage AugmentPipeline::load(int64_t index, LoadBuffers* buffers, int slot) const {
  const ImageRecord& r = record(index);
  if (!cache_.empty()) return cache_[index];
  if (decoded_)
    if (std::optional<LoadedImage> kept = decoded_->find(index)) return *kept;
  LoadedImage loaded;
  if (npy_) {  // --cache disk: the decoded pixels from the .npy beside the image
    const cv::Mat decoded = read_npy_image(npy_path_of(r.image_path));
    loaded = {resize_long_side(decoded, options_.img_size, options_.augment), decoded.rows, decoded.cols};
  } else {
    loaded = buffers ? load_image(r.image_path, options_.img_size, options_.augment, *buffers, slot)
                     : load_image(r.image_path, options_.img_size, options_.augment);
  }
  // The cache copies an image in a thread's buffer (image_cache.h).
  if (decoded_) decoded_->offer(index, loaded);
  return loaded;
}

AugmentPipeline::MosaicDraws AugmentPipeline::draw_mosaic(int64_t index, Generator& gen,
                                                          const std::vector<int64_t>& partners) const {
  const int s = options_.img_size;
  const int border = -s / 2;  // img_size is a multiple of the stride, hence even
  // Centre uniform in [s/2, 3s/2) (y drawn first, as the reference), then three partners drawn
  // with replacement, and the four shuffled (Fisher-Yates from the back, like random.shuffle).
  MosaicDraws d;
  d.yc = static_cast<int>(gen.uniform(-border, 2 * s + border));
  d.xc = static_cast<int>(gen.uniform(-border, 2 * s + border));
  d.picks = {index, 0, 0, 0};
  for (int k = 1; k < 4; ++k)
    d.picks[k] = partners.empty() ? static_cast<int64_t>(gen.randint(size()))
                                  : partners[gen.randint(partners.size())];
  for (int k = 3; k > 0; --k) std::swap(d.picks[k], d.picks[gen.randint(k + 1)]);
  d.perspective = draw_perspective(gen, options_.hyp);
  return d;
}

AugmentPipeline::Canvas AugmentPipeline::render_mosaic(const MosaicDraws& d, bool flip_lr,
                                                       bool flip_ud, cv::Mat into,
                                                       LoadBuffers* buffers) const {
  const int s = options_.img_size;
  std::array<cv::Mat, 4> tiles;
  std::array<std::vector<LabelBox>, 4> labels;
  std::array<cv::Size, 4> sizes;
  for (int k = 0; k < 4; ++k) {
    tiles[k] = load(d.picks[k], buffers, k).image;
    labels[k] = records_[d.picks[k]].boxes;
    sizes[k] = tiles[k].size();
  }
  // copy_paste needs segments, which these labels do not have: like the reference without
  // segments, it changes nothing, so it is not applied.
  Canvas out;
  if (d.perspective.px == 0 && d.perspective.py == 0) {
    // Affine: straight from the tiles (mosaic_warp.h), the same pixels as the canvas path below.
    const std::array<TilePlacement, 4> placement = place_tiles(sizes, s, d.xc, d.yc);
    const cv::Matx33d M = perspective_matrix(d.perspective, 2 * s, 2 * s, s, s);
    const cv::Matx23d affine(M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2));
    out.image = warp_mosaic_affine(tiles, placement, s, d.xc, d.yc, affine, s, s, flip_lr, flip_ud, into);
    out.boxes = warp_boxes(mosaic_boxes(labels, sizes, placement, s), M, false, d.perspective.scale, s, s);
    return out;
  }
  Mosaic m = place_mosaic(tiles, labels, s, d.xc, d.yc);
  Warped w = random_perspective(m.image, m.boxes, d.perspective, -s / 2);
  out.image = std::move(w.image);
  out.boxes = std::move(w.boxes);
  if (flip_ud) cv::flip(out.image, out.image, 0);
  if (flip_lr) cv::flip(out.image, out.image, 1);
  return out;
}

std::array<int, 2> AugmentPipeline::sample_shape(int64_t index) const {
  record(index);  // checks the index
  return options_.rect ? batch_shapes_[index / options_.batch_size]
                       : std::array<int, 2>{options_.img_size, options_.img_size};
}

Sample AugmentPipeline::get(int64_t index, Generator& gen, const std::vector<int64_t>& partners,
                            cv::Mat into, LoadBuffers* buffers) const {
  const ImageRecord& rec = record(index);
  const Hyp& hyp = options_.hyp;
  Sample out;
  out.path = rec.image_path;
  try {
    // Every draw first, in the reference's order (mosaic or not, the mosaic's draws, mixup's, the
    // perspective of a letterboxed image, HSV, flip up-down, flip left-right); the pixels after,
    // so that the flips can be made inside the mosaic's warp.
    const bool mosaic = options_.augment && !options_.rect && gen.uniform() < hyp.mosaic;
    MosaicDraws first, second;
    bool mixup = false;
    double mix_ratio = 1;
    PerspectiveParams perspective;
    if (mosaic) {
      first = draw_mosaic(index, gen, partners);
      if ((mixup = gen.uniform() < hyp.mixup)) {
        // The reference's mixup partner: random.randint(0, n - 1), any image; its mosaic's
        // partners come from the same pool as the first's.
        second = draw_mosaic(static_cast<int64_t>(gen.randint(size())), gen, partners);
        mix_ratio = sample_beta(gen, 32.0, 32.0);
      }
    } else if (options_.augment) {
      perspective = draw_perspective(gen, hyp);
    }
    const auto [hsv, flip_ud, flip_lr] = draw_finish(gen, hyp, options_.augment);

    cv::Mat img;
    if (mosaic) {
      // Flips commute with mixup's per-pixel blend, so both mosaics come out flipped.
      // The second mosaic reloads the buffers' slots: the first's tiles are done with by then.
      Canvas c = render_mosaic(first, flip_lr, flip_ud, mixup ? cv::Mat() : into, buffers);
      if (mixup) {
        Canvas other = render_mosaic(second, flip_lr, flip_ud, cv::Mat(), buffers);
        c.image = blend(c.image, other.image, mix_ratio);
        c.boxes.insert(c.boxes.end(), other.boxes.begin(), other.boxes.end());
      }
      img = std::move(c.image);
      out.labels = to_normalised_boxes(c.boxes, img.cols, img.rows);
      for (LabelBox& b : out.labels) {
        if (flip_ud) b.y = 1.0f - b.y;
        if (flip_lr) b.x = 1.0f - b.x;
      }
    } else {
      LoadedImage li = load(index, buffers, 0);  // letterbox makes a new image of it
      const int h = li.image.rows, w = li.image.cols;
      const std::array<int, 2> shape = sample_shape(index);
      Letterboxed lb = letterbox(li.image, shape[0], shape[1], false, options_.augment,
                                 options_.stride);
      out.has_shapes = true;
      out.shapes = {li.h0, li.w0, double(h) / li.h0, double(w) / li.w0, lb.pad_w, lb.pad_h};
      std::vector<PixelBox> boxes =
          to_pixel_boxes(rec.boxes, lb.ratio_w * w, lb.ratio_h * h, lb.pad_w, lb.pad_h);
      img = std::move(lb.image);
      if (options_.augment) {
        Warped wp = random_perspective(img, boxes, perspective, 0);
        img = std::move(wp.image);
        boxes = std::move(wp.boxes);
      }
      out.labels = to_normalised_boxes(boxes, img.cols, img.rows);
      if (flip_ud) data::flip_ud(img, out.labels);
      if (flip_lr) data::flip_lr(img, out.labels);
    }
    // The network's channel order, in place: every path above made img afresh (warp, blend,
    // letterbox's border, flips), so it shares no cached pixels.
    to_rgb_with_hsv_gains(img, hsv);
    if (!into.empty() && img.data != into.data && img.size() == into.size() && img.type() == into.type()) {
      img.copyTo(into);
      img = into;
    }
    out.image = std::move(img);
  } catch (const std::exception& e) {
    // A mosaic reads other images too: the inner message names the file that failed.
    KESTREL_FAIL("data pipeline: sample ", index, " (", rec.image_path, "): ", e.what());
  }
  return out;
}

std::string image_cache_line(const AugmentPipeline& pipeline) {
  constexpr double kGb = 1 << 30;
  const ImageCache* cache = pipeline.decoded_images();
  if (!cache) return "Images are decoded each time they are used (no memory to keep them)";
  const double need = static_cast<double>(pipeline.cache_bytes()), budget = static_cast<double>(cache->budget_bytes());
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line.precision(1);
  line << "Caching images as they load (" << need / kGb << "GB ram, budget " << budget / kGb
       << "GB: a quarter of the free memory";
  if (need > budget) line << "; " << static_cast<int>(100 * budget / need) << "% of them fit, the rest decode each time";
  line << "; --cache ram loads them all first)";
  return line.str();
}

std::string cache_dataset_images(AugmentPipeline& pipeline, const std::string& mode, int threads) {
  if (mode == "disk") {
    char text[64];
    std::snprintf(text, sizeof text, "Caching images (%.1fGB disk)",
                  static_cast<double>(pipeline.cache_to_disk(threads)) / (1 << 30));
    return text;
  }
  if (mode == "ram" && !pipeline.cache_images(threads))
    return cache_ram_shortfall_line("", pipeline.cache_bytes(), available_memory_bytes(), total_memory_bytes());
  return "";
}

}  // namespace kestrel::yolo::data
