// Non-maximum suppression of decoded predictions, as the reference v7.0's non_max_suppression
// (see kernels/nms.h for the exact semantics): on the CPU (float32/float64 predictions) or on a
// CUDA device (float32/float16/bfloat16), with the same kept set on both.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "engine/thread_pool.h"

namespace kestrel::yolo {

struct NmsOptions {
  double conf_thres = 0.25;  // in [0, 1]
  double iou_thres = 0.45;   // in [0, 1]
  std::vector<int> classes;  // keep only these classes; empty keeps all
  bool agnostic = false;     // suppress across classes
  bool multi_label = false;  // one box may keep several classes (val uses true)
  int64_t max_det = 300;
  int64_t max_nms = 30000;   // candidates per image entering suppression (the highest conf)
  // Mask coefficients at the end of each prediction row (a segmentation model's 32; the
  // reference's nm): they take no part in the suppression and follow each kept row.
  int64_t nm = 0;
  // CUDA only: the most workspace one group of images may take in the suppression stage; a batch
  // whose candidates need more goes through in several groups (one image at least per group).
  // The default, 1 GiB, only matters for a low conf_thres on a large batch; tests make it tiny to
  // exercise the groups.
  size_t cuda_workspace_budget = size_t(1) << 30;
};

// prediction: (batch, boxes, 5 + nc + nm) as DetectionModel::predict (or SegmentationModel's)
// returns in `boxes` (cx, cy, w, h in pixels, objectness, class scores, mask coefficients).
// Returns one CPU float32 tensor (K, 6 + nm) per image: x1, y1, x2, y2, conf, class and the kept
// box's coefficients, in descending conf order (K <= max_det). On the CPU, a pool spreads the
// images over its workers (same result).
std::vector<Tensor> non_max_suppression(const Tensor& prediction, const NmsOptions& options = {},
                                        ThreadPool* pool = nullptr);

}  // namespace kestrel::yolo
