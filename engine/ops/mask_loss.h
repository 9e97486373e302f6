// The mask term of YOLOv5's segmentation loss (the reference v7.0 single_mask_loss with
// crop_mask), per positive, with autograd to the mask coefficients and the prototypes. The
// arithmetic and its conventions are kernels/mask_loss.h.
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace kestrel::ops {

// The positives, P of them, on the prototypes' device, sorted by image and, within an image, by
// coefficient row (cell order does both).
struct MaskPositives {
  Tensor coef_row;  // int32 [P]: the row of `coefficients` holding the positive's coefficients
  Tensor image;     // int32 [P]: its image in the prototypes
  Tensor box;       // float32 [P, 4]: its crop box x1, y1, x2, y2 in prototype pixels
  Tensor area;      // float32 [P]: its box's normalised area (w * h, image size 1)
  Tensor gt_row;    // int32 [P]: the mask holding its ground truth
  Tensor gt_label;  // float32 [P]: with overlap, its instance label in that mask
};

// loss[p] = sum over the pixels inside box p of BCEWithLogits(c_p · protos[image p], gt_p)
//           / (mh * mw) / area[p]   (the reference's crop(loss).mean((1, 2)) / area)
// coefficients: (R, C), positive p's nm coefficients at row coef_row[p], columns
// [column, column + nm) (a Segment level's raw output reshaped to (cells, no), column 5 + nc).
// protos: NHWC (B, mh, mw, nm). masks: (G, gh, gw) uint8 or float32 (float64 on the CPU), resized
// to (mh, mw) by nearest neighbour as F.interpolate; overlap: masks hold instance labels and gt_p
// = (mask[gt_row[p]] == gt_label[p]); otherwise gt_p = mask[gt_row[p]]. Returns [P], float32
// (float64 for float64 inputs), differentiable w.r.t. coefficients and protos (one dtype, float32
// or float64 on the CPU, float32, float16 or bfloat16 on CUDA); the coefficients' gradient is
// dense (zero outside the rows and columns read). Positives are checked (order, ranges) where
// their index tensors are on the CPU; on CUDA they are not read back.
Tensor mask_loss(const Tensor& coefficients, int64_t column, const Tensor& protos,
                 const MaskPositives& positives, const Tensor& masks, bool overlap);

}  // namespace kestrel::ops
