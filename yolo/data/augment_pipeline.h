// One sample the way the reference's LoadImagesAndLabels.__getitem__ makes it: mosaic (+ mixup)
// and random perspective when training, letterbox to the image size or the rectangular batch
// shape otherwise, then HSV and flips when training; the image comes out RGB. The images can be
// kept in RAM (--cache ram). Every random draw comes from the Generator of (seed, rank, epoch,
// index), so a sample does not depend on which thread makes it or when.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "engine/random.h"
#include "yolo/common/hyp.h"
#include "yolo/data/augment.h"
#include "yolo/data/image_cache.h"
#include "yolo/data/image_io.h"
#include "yolo/data/records.h"

namespace kestrel::yolo::data {

struct PipelineOptions {
  int img_size = 640;   // a multiple of stride
  bool augment = false;  // training augmentations (mosaic, perspective, HSV, flips, mixup)
  bool rect = false;     // rectangular batches (sorted by aspect ratio); disables mosaic
  int batch_size = 16;   // only shapes rect batches
  int stride = 32;
  double pad = 0.0;      // rect shape padding in strides: 0.0 for training, 0.5 for validation
  Hyp hyp;
};

// What evaluation needs to map boxes back to the original image (the reference's `shapes`):
// original size, load_image's resize ratio (h / h0, w / w0) and the letterbox padding (dw, dh).
struct SampleShapes {
  int h0 = 0, w0 = 0;
  double ratio_h = 1, ratio_w = 1;
  double pad_w = 0, pad_h = 0;
};

struct Sample {
  cv::Mat image;                 // RGB, 8-bit, H x W x 3, contiguous
  std::vector<LabelBox> labels;  // normalised to `image`
  std::string path;
  bool has_shapes = false;       // false for mosaics (the reference's shapes = None)
  SampleShapes shapes;
};

// The Generator of one sample: stream (epoch << 32) + index of seed + 1 + rank, so ranks draw
// different augmentations and any (epoch, index) is reproducible on its own.
Generator sample_generator(uint64_t seed, int rank, int64_t epoch, int64_t index);

// The draws that end every training sample, after the geometric ones: HSV gains (none when every
// gain is zero), flip up-down, flip left-right, in the reference's order; nothing is drawn
// without augment.
struct FinishDraws {
  std::optional<std::array<double, 3>> hsv;
  bool flip_ud = false, flip_lr = false;
};
FinishDraws draw_finish(Generator& gen, const Hyp& hyp, bool augment);

class AugmentPipeline {
 public:
  // With rect, the records are reordered by aspect ratio (indices refer to that order).
  AugmentPipeline(std::vector<ImageRecord> records, PipelineOptions options);

  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  const ImageRecord& record(int64_t index) const;
  const PipelineOptions& options() const { return options_; }
  // Per rect batch (batch = index / batch_size): letterbox shape (height, width); empty without
  // rect.
  const std::vector<std::array<int, 2>>& batch_shapes() const { return batch_shapes_; }

  // --cache ram: decodes and resizes every image once, on `threads` threads, and keeps them.
  // Returns false (and caches nothing) when the resized images would not fit in 90% of the
  // available memory, as the reference falls back. Not thread-safe with get(): call it before
  // loading starts.
  bool cache_images(int threads);
  bool cached() const { return !cache_.empty(); }
  // --cache disk, as the reference's cache_images_to_disk: every image's decoded pixels (BGR, as
  // read, before resizing) saved once as an .npy file beside it (npy_image.h; files already there
  // are kept, the reference's included), on `threads` threads; from then on load() reads the .npy
  // instead of decoding. Returns the bytes of the .npy files. A folder that cannot be written is an
  // error naming it and the ways on.
  int64_t cache_to_disk(int threads);
  // Bytes the cache holds (or would hold: computed from the records' sizes).
  int64_t cache_bytes() const;

  // Without --cache ram: decoded images are kept as they are first loaded, shared by the loader's
  // threads, up to budget_bytes (image_cache.h; 0 turns it off, the default). Call it before
  // loading starts.
  void keep_decoded_images(int64_t budget_bytes);
  const ImageCache* decoded_images() const { return decoded_.get(); }

  // The image of `index` at long side img_size (from the cache when there is one). With
  // `buffers`, a decoded image is made in buffers->slots[slot] (load_image in image_io.h: valid
  // until that slot's next load).
  LoadedImage load(int64_t index, LoadBuffers* buffers = nullptr, int slot = 0) const;
  // The sample of `index`. Thread-safe; errors name the file. A mosaic's three partners are drawn
  // from `partners` when given (--image-weights: the epoch's weighted draw, as the reference's
  // random.choices(self.indices, k=3)), else from the whole dataset.
  // When `into` is already the sample's shape (sample_shape) in 8-bit 3-channel pixels, the image
  // is made there (a batch's slot: no image of its own, no copy) and out.image shares it.
  // `buffers`: the calling thread's memory for decoding (one per thread; the same pixels as
  // without it, and the sample never refers to it).
  Sample get(int64_t index, Generator& gen, const std::vector<int64_t>& partners = {},
             cv::Mat into = {}, LoadBuffers* buffers = nullptr) const;
  // The (height, width) of sample `index`'s image: the rect batch's shape, else img_size square.
  std::array<int, 2> sample_shape(int64_t index) const;

 private:
  // A mosaic's random draws, in the reference's order: centre (y first), three partners, their
  // shuffle, the perspective.
  struct MosaicDraws {
    int xc = 0, yc = 0;
    std::array<int64_t, 4> picks{};
    PerspectiveParams perspective;
  };
  MosaicDraws draw_mosaic(int64_t index, Generator& gen, const std::vector<int64_t>& partners) const;
  // The s x s BGR mosaic (flipped as asked) and its boxes in its pixels (not flipped).
  struct Canvas {
    cv::Mat image;
    std::vector<PixelBox> boxes;
  };
  Canvas render_mosaic(const MosaicDraws& draws, bool flip_lr, bool flip_ud, cv::Mat into,
                       LoadBuffers* buffers) const;

  std::vector<ImageRecord> records_;
  PipelineOptions options_;
  std::vector<std::array<int, 2>> batch_shapes_;
  std::vector<LoadedImage> cache_;
  bool npy_ = false;  // --cache disk: load() reads each image's .npy
  std::unique_ptr<ImageCache> decoded_;
};

// The decoded-image cache's console line, as the reference's "Caching images (0.1GB ram)": how much
// the dataset needs and the budget, and which share of it fits when not all does.
std::string image_cache_line(const AugmentPipeline& pipeline);

// --cache for a loader (training's, and the val loader's in training, which the reference gives
// the same --cache unless --noval): "disk" saves and reads .npy files, "ram" keeps the images
// when they fit, "" nothing. Returns the line to say after the loader's prefix ("" for none):
// "Caching images (0.1GB disk)", or the reference's check_cache_ram line when they do not fit.
std::string cache_dataset_images(AugmentPipeline& pipeline, const std::string& mode, int threads);

}  // namespace kestrel::yolo::data
