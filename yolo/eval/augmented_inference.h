// Test-time augmentation (`val --augment`, `detect --augment`), as the reference's
// DetectionModel._forward_augment: the images run at scales 1, 0.83 and 0.67, the 0.83 pass
// mirrored left-right; each pass's predictions are mapped back to the unscaled image, the full
// scale drops its coarsest level (large objects) and the smallest scale its finest (small
// objects), and the rest are joined along the box axis for the usual NMS. The arithmetic is in
// kernels/tta.h (CPU and CUDA).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "yolo/model/model.h"

namespace kestrel::yolo {

struct TtaPass {
  double scale;
  bool flip_lr;
};
// The reference's three passes.
const std::vector<TtaPass>& tta_passes();

// The reference's scale_img sizes for an h x w image: the resized size int(h * ratio) x
// int(w * ratio), padded up to multiples of gs (ratio 1: the image as it is).
struct ScaledSize {
  int64_t h, w, padded_h, padded_w;
};
ScaledSize tta_scaled_size(int64_t h, int64_t w, double ratio, int64_t gs);

// NHWC images mirrored left-right (flip_lr), resized by `ratio` (bilinear, align_corners=False)
// and padded with 0.447 to multiples of gs; ratio 1 without a mirror returns x itself.
Tensor tta_scale_image(const Tensor& x, double ratio, int64_t gs, bool flip_lr);

// Predictions (batch, boxes, no) of a pass at `scale` back to an image img_w wide: a new tensor
// (boxes itself at scale 1 without a mirror, where nothing changes).
Tensor tta_descale(const Tensor& boxes, double scale, bool flip_lr, int64_t img_w);

// The reference's _clip_augmented: of a detector with nl levels, the first pass loses its last
// level's boxes and the last pass its first level's.
std::vector<Tensor> tta_clip(std::vector<Tensor> passes, int64_t nl);

// The augmented prediction of a batch (boxes only, decoded): (batch, boxes of all passes, no).
Tensor predict_augmented(DetectionModel& model, const Tensor& x);

}  // namespace kestrel::yolo
