// One instance-segmentation sample the way the reference's LoadImagesAndLabelsAndMasks.__getitem__
// makes it (v7.0 utils/segment/dataloaders.py): when training, a mosaic with its polygons (copy
// paste, then the segment random_perspective, boxes from the moved polygons) and mixup; otherwise
// letterbox to the image size or the rect batch shape with the polygons scaled and padded (and a
// random_perspective when augmenting without mosaic). Then the masks, in the augmented image's
// pixels downsampled by the mask ratio: one overlap image (instances by falling area, labels
// reordered to match) or one mask per instance; then HSV and flips of image, labels and masks.
//
// Images, records, rect batches and caches are detection's AugmentPipeline (augment_pipeline.h),
// whose records carry the polygons (ImageRecord::segments). The randomness is the Generator of
// (seed, rank, epoch, index) (sample_generator), drawn in the reference's order, so a sample does
// not depend on which thread makes it.
#pragma once
#include <array>
#include <cstdint>
#include <opencv2/core.hpp>
#include <vector>

#include "engine/random.h"
#include "yolo/data/augment_pipeline.h"
#include "yolo/data/seg_labels.h"

namespace kestrel::yolo::data {

struct SegMaskOptions {
  int downsample_ratio = 4;  // --mask-ratio: masks are (H / ratio) x (W / ratio)
  bool overlap = true;       // --overlap-mask: one image of instance numbers per sample
};

struct SegSample {
  Sample sample;  // RGB image, labels, path and shapes as AugmentPipeline::get makes them
  // overlap: one image (CV_8U, CV_32S past 255 instances) whose pixel k + 1 marks sample.labels[k]
  // (0: none), all zero without labels; otherwise one CV_8U 0/1 mask per label, in their order.
  std::vector<cv::Mat> masks;
};

class SegAugmentPipeline {
 public:
  // The records' segments pair up with their boxes (or are empty: plain box labels, whose
  // instances then have empty masks). With rect, the records are reordered as detection's.
  SegAugmentPipeline(std::vector<ImageRecord> records, PipelineOptions options, SegMaskOptions masks = {});

  // Images, records, rect shapes and caching (--cache ram / disk before loading starts).
  const AugmentPipeline& images() const { return images_; }
  AugmentPipeline& images() { return images_; }
  int64_t size() const { return images_.size(); }
  const SegMaskOptions& mask_options() const { return masks_; }
  // The (height, width) of sample `index`'s masks: its image shape divided by the mask ratio.
  std::array<int, 2> mask_shape(int64_t index) const;

  // The sample of `index`; partners, into and buffers as AugmentPipeline::get. Thread-safe.
  SegSample get(int64_t index, Generator& gen, const std::vector<int64_t>& partners = {},
                cv::Mat into = {}, LoadBuffers* buffers = nullptr) const;

 private:
  // A mosaic's random draws, in the reference's order: centre (y first), three partners (the
  // segmentation mosaic does not shuffle them), copy_paste's instances, the perspective.
  struct MosaicDraws {
    int xc = 0, yc = 0;
    std::array<int64_t, 4> picks{};
    std::vector<int64_t> pasted;
    PerspectiveParams perspective;
  };
  MosaicDraws draw_mosaic(int64_t index, Generator& gen, const std::vector<int64_t>& partners) const;
  // Instances with their polygons, in pixels of `image`.
  struct Canvas {
    cv::Mat image;
    std::vector<PixelBox> boxes;
    std::vector<PixelSegment> segments;
  };
  // The s x s BGR mosaic after copy_paste and the perspective (image flipped as asked, boxes and
  // polygons not).
  Canvas render_mosaic(const MosaicDraws& draws, bool flip_lr, bool flip_ud, cv::Mat into,
                       LoadBuffers* buffers) const;
  // The letterboxed image (not flipped) with its instances, the perspective applied when given.
  Canvas render_letterbox(int64_t index, const PerspectiveParams* perspective, SampleShapes& shapes,
                          LoadBuffers* buffers) const;
  // Labels normalised to the image and the masks of the polygons (labels reordered with overlap).
  void make_masks(const Canvas& canvas, SegSample& out) const;

  AugmentPipeline images_;
  SegMaskOptions masks_;
};

}  // namespace kestrel::yolo::data
