// The YOLOv5 training loss, numerically the reference v7.0 ComputeLoss (utils/loss.py) with
// bbox_iou's CIoU: build_targets (anchor ratio < anchor_t, centre cell plus the two nearest
// neighbour cells), box loss mean(1 - CIoU), objectness BCE against the detached CIoU clamped at 0
// with the level balance [4, 1, 0.4] (P6 and others: [4, 1, 0.25, 0.06, 0.02]), class BCE against
// smoothed one-hot targets when nc > 1, focal modulation when fl_gamma > 0; components times
// hyp box/obj/cls, total = (box + obj + cls) * batch size. autobalance and sort_obj_iou are off,
// gr = 1, as in the reference's training.
//
// One difference by definition: where two matches assign the same cell and anchor, the reference
// keeps an unspecified one of their CIoUs as the objectness target; we keep the last match in
// build_targets order (offset, then anchor, then target row), on the CPU and on CUDA alike.
// Targets rows must be valid (finite; image and class integers in range; 0 <= x, y <= 1;
// w, h >= 0): an invalid row is an error naming it.
#pragma once
#include <vector>

#include "engine/tensor.h"
#include "layers/detect.h"
#include "yolo/common/hyp.h"

namespace kestrel::yolo {

struct LossResult {
  Tensor total;           // 0-d, differentiable w.r.t. the predictions: (box + obj + cls) * bs
  double box, obj, cls;   // the components (the reference's detached torch.cat((lbox, lobj, lcls)))
};

// The loss as the device holds it, nothing read back (the training step's form): total as in
// LossResult, and the kernels' summary, float64 [kernels::kSummarySize] on the predictions'
// device, whose kSummaryBox/Obj/Cls entries are the components and kSummaryBadRow the first
// invalid target row (-1 when none).
struct DeviceLoss {
  Tensor total;
  Tensor summary;
};

// The reference train.py's loss hyperparameter scaling, applied once by the trainer before it
// builds ComputeLoss: box *= 3/nl, cls *= nc/80 * 3/nl, obj *= (img_size/640)^2 * 3/nl, in the
// reference's operation order. label_smoothing is taken as it is in hyp (the trainer sets it from
// --label-smoothing, as train.py does).
Hyp scale_loss_hyp(Hyp hyp, int nl, int nc, int img_size);

// targets (float32 [M, 6]) followed by padding rows (image index -1, kernels::kPaddingImage) up to
// `rows` rows, on the targets' device (pinned if they are): padding rows match nothing and are not
// invalid, so the loss and its gradient equal the unpadded ones, while the loss's buffers get a
// size that does not follow each batch's label count. Throws when M > rows.
Tensor pad_targets(const Tensor& targets, int64_t rows);
// The padded row count for m targets: the next power of two, at least 64, so that a run sees few
// sizes (the allocator and the uploader's ring reuse their blocks; a fixed-size step can be
// captured once per size).
int64_t padded_target_rows(int64_t m);

class ComputeLoss {
 public:
  // detect: the model's head (nc, na, nl, anchors in stride units); hyp: already scaled. The
  // anchors are copied here (each step passes them as kernel arguments, with no host read), so
  // build the loss once the model's anchors are final (after AutoAnchor or a checkpoint's load).
  ComputeLoss(const layers::Detect& detect, const Hyp& hyp);

  // preds: the Detect raw outputs per level, (bs, na, ny, nx, nc + 5): float32/float64 on the CPU,
  // float32/float16/bfloat16 on CUDA, all on one device with one dtype. targets: float32 [M, 6]
  // (image, class, x, y, w, h normalised), on any device. total is float32 (float64 for float64
  // predictions); its gradient reaches every element of every level. Reading the components
  // waits for the device.
  LossResult operator()(const std::vector<Tensor>& preds, const Tensor& targets) const;
  // The same loss without any host read: targets are not checked against the summary's invalid
  // row here, so check them on the host first (check_targets) where they come from the host.
  DeviceLoss forward(const std::vector<Tensor>& preds, const Tensor& targets) const;
  // Throws naming the first invalid row of targets (any device; a CUDA tensor is read back), for
  // a batch of bs images: the check operator() makes, done before the upload.
  void check_targets(const Tensor& targets, int64_t bs) const;

  const std::vector<double>& balance() const { return balance_; }

 private:
  int64_t nc_, na_, nl_;
  std::vector<float> anchors_;  // (nl, na, 2) grid units
  std::vector<double> balance_;
  Hyp hyp_;
};

}  // namespace kestrel::yolo
