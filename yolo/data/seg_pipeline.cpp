#include "yolo/data/seg_pipeline.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "base/error.h"
#include "yolo/data/seg_augment.h"
#include "yolo/data/seg_masks.h"

namespace kestrel::yolo::data {

namespace {

// A record's polygons in pixels of a w x h image shifted by (padw, padh), one per box: an empty
// polygon for each box of plain box labels.
std::vector<PixelSegment> pixel_segments(const ImageRecord& r, double w, double h, double padw, double padh) {
  std::vector<PixelSegment> out(r.boxes.size());
  if (r.segments.size() != r.boxes.size()) return out;
  for (size_t i = 0; i < out.size(); ++i) out[i] = segment_to_pixels(r.segments[i], w, h, padw, padh);
  return out;
}

// random.sample(range(n), k): k distinct instances, in draw order (partial Fisher-Yates).
std::vector<int64_t> sample_without_replacement(Generator& gen, int64_t n, int64_t k) {
  std::vector<int64_t> pool(n);
  for (int64_t i = 0; i < n; ++i) pool[i] = i;
  for (int64_t i = 0; i < k; ++i)
    std::swap(pool[i], pool[i + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(n - i)))]);
  pool.resize(k);
  return pool;
}

// The flips of normalised labels and their masks (the image is flipped by its renderer).
void mirror(SegSample& out, bool flip_lr, bool flip_ud) {
  for (LabelBox& b : out.sample.labels) {
    if (flip_ud) b.y = 1.0f - b.y;
    if (flip_lr) b.x = 1.0f - b.x;
  }
  if (flip_ud) flip_masks_ud(out.masks);
  if (flip_lr) flip_masks_lr(out.masks);
}

}  // namespace

SegAugmentPipeline::SegAugmentPipeline(std::vector<ImageRecord> records, PipelineOptions options,
                                       SegMaskOptions masks)
    : images_(std::move(records), std::move(options)), masks_(masks) {
  KESTREL_CHECK(masks_.downsample_ratio >= 1, "segmentation pipeline: the mask ratio must be >= 1, got ",
                masks_.downsample_ratio);
  for (int64_t i = 0; i < images_.size(); ++i) {
    const ImageRecord& r = images_.record(i);
    KESTREL_CHECK(r.segments.empty() || r.segments.size() == r.boxes.size(), "segmentation pipeline: ",
                  r.image_path, " has ", r.boxes.size(), " boxes but ", r.segments.size(),
                  " polygons; each instance needs one of each");
  }
}

std::array<int, 2> SegAugmentPipeline::mask_shape(int64_t index) const {
  const std::array<int, 2> shape = images_.sample_shape(index);
  return {shape[0] / masks_.downsample_ratio, shape[1] / masks_.downsample_ratio};
}

SegAugmentPipeline::MosaicDraws SegAugmentPipeline::draw_mosaic(int64_t index, Generator& gen,
                                                                const std::vector<int64_t>& partners) const {
  const PipelineOptions& o = images_.options();
  const int s = o.img_size;
  MosaicDraws d;
  d.yc = static_cast<int>(gen.uniform(s / 2, 2 * s - s / 2));
  d.xc = static_cast<int>(gen.uniform(s / 2, 2 * s - s / 2));
  d.picks = {index, 0, 0, 0};
  int64_t instances = static_cast<int64_t>(images_.record(index).boxes.size());
  for (int k = 1; k < 4; ++k) {
    d.picks[k] = partners.empty() ? static_cast<int64_t>(gen.randint(size()))
                                  : partners[gen.randint(partners.size())];
    instances += static_cast<int64_t>(images_.record(d.picks[k]).boxes.size());
  }
  // round(p * n) as Python rounds (halves to even, std::nearbyint's default mode).
  if (o.hyp.copy_paste > 0 && instances > 0)
    d.pasted = sample_without_replacement(
        gen, instances, static_cast<int64_t>(std::nearbyint(o.hyp.copy_paste * static_cast<double>(instances))));
  d.perspective = draw_perspective(gen, o.hyp);
  return d;
}

SegAugmentPipeline::Canvas SegAugmentPipeline::render_mosaic(const MosaicDraws& d, bool flip_lr, bool flip_ud,
                                                             cv::Mat into, LoadBuffers* buffers) const {
  const int s = images_.options().img_size;
  std::array<cv::Mat, 4> tiles;
  std::array<std::vector<LabelBox>, 4> labels;
  std::array<cv::Size, 4> sizes;
  for (int k = 0; k < 4; ++k) {
    tiles[k] = images_.load(d.picks[k], buffers, k).image;
    labels[k] = images_.record(d.picks[k]).boxes;
    sizes[k] = tiles[k].size();
  }
  const std::array<TilePlacement, 4> placement = place_tiles(sizes, s, d.xc, d.yc);
  std::vector<PixelBox> boxes = mosaic_boxes(labels, sizes, placement, s);
  std::vector<PixelSegment> segments;
  for (int k = 0; k < 4; ++k)
    for (PixelSegment& seg : pixel_segments(images_.record(d.picks[k]), sizes[k].width, sizes[k].height,
                                            placement[k].dx, placement[k].dy)) {
      for (cv::Point2d& p : seg) p = {std::clamp(p.x, 0.0, 2.0 * s), std::clamp(p.y, 0.0, 2.0 * s)};
      segments.push_back(std::move(seg));
    }
  const bool projective = d.perspective.px != 0 || d.perspective.py != 0;
  const cv::Matx33d M = perspective_matrix(d.perspective, 2 * s, 2 * s, s, s);
  Canvas out;
  if (!projective && d.pasted.empty()) {
    // Affine and nothing pasted: straight from the tiles, the pixels of the canvas path below.
    const cv::Matx23d affine(M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2));
    out.image = warp_mosaic_affine(tiles, placement, s, d.xc, d.yc, affine, s, s, flip_lr, flip_ud, into);
  } else {
    Mosaic m = place_mosaic(tiles, labels, s, d.xc, d.yc);
    copy_paste(m.image, boxes, segments, d.pasted);
    out.image = random_perspective(m.image, {}, d.perspective, -s / 2).image;
    if (flip_ud) cv::flip(out.image, out.image, 0);
    if (flip_lr) cv::flip(out.image, out.image, 1);
  }
  WarpedSegments w = warp_segments(boxes, segments, M, projective, d.perspective.scale, s, s);
  out.boxes = std::move(w.boxes);
  out.segments = std::move(w.segments);
  return out;
}

SegAugmentPipeline::Canvas SegAugmentPipeline::render_letterbox(int64_t index, const PerspectiveParams* perspective,
                                                                SampleShapes& shapes, LoadBuffers* buffers) const {
  const PipelineOptions& o = images_.options();
  const ImageRecord& rec = images_.record(index);
  LoadedImage li = images_.load(index, buffers, 0);  // letterbox makes a new image of it
  const int h = li.image.rows, w = li.image.cols;
  const std::array<int, 2> shape = images_.sample_shape(index);
  Letterboxed lb = letterbox(li.image, shape[0], shape[1], false, o.augment, o.stride);
  shapes = {li.h0, li.w0, double(h) / li.h0, double(w) / li.w0, lb.pad_w, lb.pad_h};
  const double sw = lb.ratio_w * w, sh = lb.ratio_h * h;
  Canvas out{std::move(lb.image), to_pixel_boxes(rec.boxes, sw, sh, lb.pad_w, lb.pad_h),
             pixel_segments(rec, sw, sh, lb.pad_w, lb.pad_h)};
  if (perspective) {
    // The segment random_perspective: boxes come from the moved polygons, even when nothing moves.
    const int width = out.image.cols, height = out.image.rows;
    const cv::Matx33d M = perspective_matrix(*perspective, width, height, width, height);
    out.image = random_perspective(out.image, {}, *perspective, 0).image;
    WarpedSegments ws = warp_segments(out.boxes, out.segments, M, perspective->px != 0 || perspective->py != 0,
                                      perspective->scale, width, height);
    out.boxes = std::move(ws.boxes);
    out.segments = std::move(ws.segments);
  }
  return out;
}

void SegAugmentPipeline::make_masks(const Canvas& c, SegSample& out) const {
  const int h = c.image.rows, w = c.image.cols, r = masks_.downsample_ratio;
  std::vector<LabelBox> labels = to_normalised_boxes(c.boxes, w, h);
  out.masks.clear();
  if (!masks_.overlap) {
    out.masks = polygons_to_masks(h, w, c.segments, 1, r);
  } else if (labels.empty()) {
    out.masks.push_back(cv::Mat::zeros(h / r, w / r, CV_8U));
  } else {
    OverlapMasks om = polygons_to_masks_overlap(h, w, c.segments, r);
    std::vector<LabelBox> sorted;
    sorted.reserve(labels.size());
    for (int64_t k : om.order) sorted.push_back(labels[k]);
    labels = std::move(sorted);
    out.masks.push_back(std::move(om.mask));
  }
  out.sample.labels = std::move(labels);
}

SegSample SegAugmentPipeline::get(int64_t index, Generator& gen, const std::vector<int64_t>& partners,
                                  cv::Mat into, LoadBuffers* buffers) const {
  const ImageRecord& rec = images_.record(index);
  const PipelineOptions& o = images_.options();
  const Hyp& hyp = o.hyp;
  SegSample out;
  out.sample.path = rec.image_path;
  try {
    // Every draw first, in the reference's order (mosaic or not, the mosaic's draws, mixup's, the
    // perspective of a letterboxed image, HSV, flip up-down, flip left-right); the pixels after.
    const bool mosaic = o.augment && !o.rect && gen.uniform() < hyp.mosaic;
    MosaicDraws first, second;
    bool mixup = false;
    double mix_ratio = 1;
    PerspectiveParams perspective;
    if (mosaic) {
      first = draw_mosaic(index, gen, partners);
      if ((mixup = gen.uniform() < hyp.mixup)) {
        second = draw_mosaic(static_cast<int64_t>(gen.randint(size())), gen, partners);
        mix_ratio = sample_beta(gen, 32.0, 32.0);
      }
    } else if (o.augment) {
      perspective = draw_perspective(gen, hyp);
    }
    const auto [hsv, flip_ud, flip_lr] = draw_finish(gen, hyp, o.augment);

    Canvas c;
    if (mosaic) {
      // The mosaics come out flipped (flips commute with mixup's blend); labels and masks are
      // flipped after the masks are drawn, as the reference flips its mask tensor.
      c = render_mosaic(first, flip_lr, flip_ud, mixup ? cv::Mat() : into, buffers);
      if (mixup) {
        Canvas other = render_mosaic(second, flip_lr, flip_ud, cv::Mat(), buffers);
        c.image = blend(c.image, other.image, mix_ratio);
        c.boxes.insert(c.boxes.end(), other.boxes.begin(), other.boxes.end());
        for (PixelSegment& s : other.segments) c.segments.push_back(std::move(s));
      }
    } else {
      c = render_letterbox(index, o.augment ? &perspective : nullptr, out.sample.shapes, buffers);
      out.sample.has_shapes = true;
      if (flip_ud) cv::flip(c.image, c.image, 0);
      if (flip_lr) cv::flip(c.image, c.image, 1);
    }
    make_masks(c, out);
    mirror(out, flip_lr, flip_ud);
    // Every path made the image afresh (warp, blend, letterbox's border), so it shares no cached
    // pixels and can be converted in place.
    cv::Mat img = std::move(c.image);
    to_rgb_with_hsv_gains(img, hsv);
    if (!into.empty() && img.data != into.data && img.size() == into.size() && img.type() == into.type()) {
      img.copyTo(into);
      img = into;
    }
    out.sample.image = std::move(img);
  } catch (const std::exception& e) {
    KESTREL_FAIL("segmentation pipeline: sample ", index, " (", rec.image_path, "): ", e.what());
  }
  return out;
}

}  // namespace kestrel::yolo::data
