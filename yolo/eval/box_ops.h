// Box arithmetic on CPU float32 tensors with the reference v7.0's float32 operations (its
// xywh2xyxy, box_iou, scale_boxes and clip_boxes on torch CPU tensors), so that IoU thresholds and
// clipped coordinates land on the same side as there.
#pragma once
#include <optional>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo {

struct ImageSize {
  int64_t height = 0, width = 0;
};

// The letterbox of one image as the data loader recorded it: the gain applied to the original
// image and the padding added on the left and top (the reference's ratio_pad = ((gain, gain),
// (pad_w, pad_h)); only its first gain is used, as there).
struct RatioPad {
  double gain = 1.0;
  double pad_w = 0.0, pad_h = 0.0;
};

// One label of a batch, xyxy in the pixels of the batch's letterboxed images.
struct LabelBox {
  int64_t image = 0;  // index in the batch
  float cls = 0;
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};
// A batch's targets (M, 6: image, class, x, y, w, h normalised) as label boxes, in float32 as the
// reference's val.py computes them (targets times (w, h, w, h), then xywh2xyxy): validation
// matches detections against exactly these, and the batch plots draw them.
std::vector<LabelBox> label_boxes(const Tensor& targets, int64_t height, int64_t width);

// (n, 4) centre x, y, width, height -> (n, 4) corners x1, y1, x2, y2.
Tensor xywh2xyxy(const Tensor& boxes);

// IoU of every box of a (n, 4) with every box of b (m, 4), both xyxy: (n, m), computed as the
// reference's box_iou (float32, eps 1e-7 in the denominator).
Tensor box_iou(const Tensor& a, const Tensor& b);
// One pair, the same arithmetic.
float box_iou_xyxy(const float* a, const float* b);

// In place: the first four columns of `boxes` (n, >= 4), xyxy in the pixels of an image of size
// `letterboxed`, mapped to an image of size `original`: padding subtracted, divided by the gain,
// clipped. Without ratio_pad the gain and a centred padding are derived from the two sizes.
void scale_boxes(const Tensor& boxes, ImageSize letterboxed, ImageSize original,
                 std::optional<RatioPad> ratio_pad = std::nullopt);
// In place: x into [0, width], y into [0, height].
void clip_boxes(const Tensor& boxes, ImageSize size);

}  // namespace kestrel::yolo
