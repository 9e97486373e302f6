// Instance masks from a segmentation model's output, with the reference v7.0's arithmetic
// (utils/segment/general.py: crop_mask, process_mask, process_mask_upsample, scale_image,
// mask_iou, masks2segments; segment/val.py's handling of label masks), on CPU tensors.
//
// A mask is the sigmoid of a detection's 32 coefficients dotted with the prototypes at each
// pixel of the prototype grid (h/4 x w/4 of the input image), cropped to the detection's box,
// resized with torch's bilinear F.interpolate (align_corners=False; kernels/tta.h's taps, mixed as
// torch's CPU kernel for outputs of height + width > 128 does: see upsample_bilinear) and
// thresholded (> 0.5, strictly). The variants differ only in where the crop and the resize happen:
//   process_mask           crop on the prototype grid (boxes scaled by mw/iw, mh/ih in float32),
//                          upsampled to the input image only when asked (val.py: no; predict: yes)
//   process_mask_upsample  upsample to the input image, then crop with the boxes as they are
//                          (val.py with --save-json)
//   process_mask_native    cut the letterbox padding off the prototype grid, upsample to the
//                          original image, crop with boxes in its pixels (--retina-masks; the
//                          reference's later versions: v7.0 has no such function)
// Crop (crop_mask): pixel (y, x) is kept when x >= x1, x < x2, y >= y1 and y < y2, comparing the
// float32 index with the box's float32 edges, so a box [2.5, 0, 4, 1] keeps columns 3 only.
// Only the pixels that a box can keep are computed; the rest are zero, as the reference's
// product with the crop makes them (a NaN outside a box, which the reference would spread through
// the resize, is not reproduced).
//
// Layouts (all CPU):
//   protos        float32 (mh, mw, nm): one image of layers::Segment's NHWC prototypes
//                 (bs, mh, mw, nm), e.g. protos.slice(0, i, i + 1).reshape({mh, mw, nm})
//   coefficients  float32 (n, nm): the NMS rows' columns 6.. (the reference's pred[:, 6:])
//   boxes         float32 (n, 4): x1, y1, x2, y2 in the pixels of the image the masks are made
//                 for (pred[:, :4])
//   masks         uint8 (n, h, w), each pixel 0 or 1, rows contiguous
// Numbers: the dot products are summed in double and rounded once (the reference's float32
// matmul adds in BLAS's order, so the sigmoid input can differ in its last bit); the sigmoid is
// 1 / (1 + exp(-x)) in float32 (torch's vectorised exp can differ by an ulp); the resize and the
// crop are the reference's CPU arithmetic to the bit. A pixel flips only where a value lies
// within an ulp or two of 0.5.
#pragma once
#include <array>
#include <optional>
#include <vector>

#include "engine/tensor.h"
#include "yolo/eval/box_ops.h"

namespace kestrel::yolo {

// masks float32 (n, h, w) times the crop of boxes (n, 4) in the masks' pixels: a new tensor.
Tensor crop_mask(const Tensor& masks, const Tensor& boxes);

// float32 (n, h, w) -> (n, out_h, out_w): F.interpolate(masks[None], (out_h, out_w),
// mode='bilinear', align_corners=False)[0], bit for bit as torch's CPU computes it (PyTorch 2.x,
// AVX2/AVX512 kernels) when out_h + out_w > 128, as every image-sized output is: its generic
// kernel, whose pairs the compiler fuses as fma(v0, w0, v1 * w1). Smaller outputs go through
// another torch kernel, which differs from this in the last bit at some pixels; so do torch's
// CUDA kernel and its builds without FMA.
Tensor upsample_bilinear(const Tensor& masks, int64_t out_h, int64_t out_w);

// The masks of n detections on an input image of size `shape`: (n, mh, mw), or (n, shape) when
// upsample.
Tensor process_mask(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes, ImageSize shape,
                    bool upsample = false);
// (n, shape): upsampled first, then cropped.
Tensor process_mask_upsample(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes,
                             ImageSize shape);
// (n, original): the letterbox's padding (centred, from the two sizes' ratio, as the reference
// derives it) cut off the prototype grid, the rest upsampled to `original` and cropped with boxes
// given in the original image's pixels (scale_boxes'd detections).
Tensor process_mask_native(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes,
                           ImageSize original);

// IoU of every mask of a (N, ...) with every mask of b (M, ...), uint8 0/1 with the same number
// of pixels: (N, M) float32, intersection / (union + 1e-7) in float32 as the reference's mask_iou
// (exact pixel counts, as its float32 matmul has them up to 2^24 pixels per mask).
Tensor mask_iou(const Tensor& a, const Tensor& b);

// The label masks val.py matches against, as uint8 (nl, size): `gt` holds the image's label
// masks, float32 or uint8, either one per label (nl, gh, gw), or with overlap (the loader's
// --overlap-mask) one (1, gh, gw) or (gh, gw) image whose pixel value k in 1..nl marks label k - 1.
// When (gh, gw) differs from `size` (the predicted masks' size) they are resized bilinearly and
// thresholded at 0.5, as process_batch does.
Tensor label_masks(const Tensor& gt, int64_t nl, bool overlap, ImageSize size);

// The reference's scale_image on masks (n, h, w) of the letterboxed input: the padding cut off
// (from ratio_pad, or centred from the two sizes' ratio), the rest resized to `original` with
// OpenCV's INTER_LINEAR (cv2.resize, the same library): (n, original), for --save-json.
Tensor scale_masks_to_original(const Tensor& masks, ImageSize original,
                               std::optional<RatioPad> ratio_pad = std::nullopt);

// One contour of a mask: points x, y in its pixels.
using MaskPolygon = std::vector<std::array<float, 2>>;
enum class SegmentStrategy {
  kLargest,  // the external contour with the most points (the first of equals)
  kConcat,   // every external contour's points, one after another
};
// masks2segments: OpenCV's findContours (RETR_EXTERNAL, CHAIN_APPROX_SIMPLE) on each mask of
// (n, h, w); a mask without set pixels gives an empty polygon.
std::vector<MaskPolygon> masks_to_segments(const Tensor& masks,
                                           SegmentStrategy strategy = SegmentStrategy::kLargest);

}  // namespace kestrel::yolo
