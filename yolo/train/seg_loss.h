// The YOLOv5 segmentation loss, numerically the reference v7.0 utils/segment/loss.py ComputeLoss:
// the box, objectness and class terms are detection's (yolo/train/loss.h, on the first 5 + nc
// channels of each level), plus the mask term. Its build_targets lists the same matches as
// detection's (offset, anchor, target), each carrying its target's mask index (tidx) and its box
// normalised (xywhn); per level and per image with matches, the mask loss of its matches
//   single_mask_loss = mean over the image's matches of
//                      crop(BCEWithLogits(coefficients · prototypes, gt mask)).mean() / area
// (ops::mask_loss), summed over images and levels, then lseg *= hyp box / bs. The total is
// (lbox + lseg + lobj + lcls) * bs and the items are (lbox, lseg, lobj, lcls), the reference's
// order.
//
// Ground-truth masks: with overlap (the reference's --overlap-mask, its default), one index mask
// per image (bs, gh, gw) whose pixels hold 0 or k for the image's k-th target (1-based, in the
// targets' order, as the loader writes them); without, one mask per target row (nt, gh, gw).
// Masks whose size differs from the prototypes' are read resized by nearest neighbour, as the
// reference's F.interpolate.
//
// The matches of the mask term are listed on the host from the targets (a CUDA targets tensor is
// read back, which waits for the device), sorted by cell (which groups them by image, the order
// inside an image only changing the rounding of its mean), and uploaded. Targets are checked as
// detection's (yolo/train/loss.h); padding rows (image -1) match nothing.
#pragma once
#include <vector>

#include "engine/tensor.h"
#include "layers/detect.h"
#include "yolo/common/hyp.h"
#include "yolo/train/loss.h"

namespace kestrel::yolo {

struct SegLossResult {
  Tensor total;                // 0-d, differentiable w.r.t. predictions and prototypes
  double box, seg, obj, cls;   // the reference's torch.cat((lbox, lseg, lobj, lcls))
};

// The loss as the device holds it: total as above, detection's summary (loss.h's DeviceLoss:
// box, obj, cls) and lseg, a 0-d tensor on the predictions' device (no history).
struct SegDeviceLoss {
  Tensor total;
  Tensor summary;
  Tensor seg;
};

class ComputeSegLoss {
 public:
  // head: the model's Segment (a Detect with nm > 0; nc, na, nl, anchors in stride units, copied
  // here as ComputeLoss does); hyp: already scaled (scale_loss_hyp); overlap: the masks' form.
  ComputeSegLoss(const layers::Detect& head, const Hyp& hyp, bool overlap);

  // preds: Segment's raw outputs per level, (bs, na, ny, nx, 5 + nc + nm); protos: NHWC
  // (bs, mh, mw, nm), one dtype and device with preds (float32/float64 on the CPU,
  // float32/float16/bfloat16 on CUDA). targets: float [M, 6] (image, class, x, y, w, h
  // normalised), any device. masks: uint8 or float, (bs, gh, gw) with overlap, else (M, gh, gw).
  // Reading the items waits for the device.
  SegLossResult operator()(const std::vector<Tensor>& preds, const Tensor& protos,
                           const Tensor& targets, const Tensor& masks) const;
  // The same loss without reading the losses back (the targets are still read to the host).
  SegDeviceLoss forward(const std::vector<Tensor>& preds, const Tensor& protos,
                        const Tensor& targets, const Tensor& masks) const;

  bool overlap() const { return overlap_; }

 private:
  ComputeLoss detection_;
  int64_t nc_, na_, nl_, nm_;
  std::vector<float> anchors_;  // (nl, na, 2) grid units
  Hyp hyp_;
  bool overlap_;
};

}  // namespace kestrel::yolo
