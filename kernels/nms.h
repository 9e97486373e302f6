// Non-maximum suppression of decoded YOLOv5 predictions (the reference v7.0's
// non_max_suppression with torchvision's greedy nms):
//   1. candidates: objectness > conf_thres; conf = obj * class score; multi_label keeps every
//      (box, class) pair with conf > conf_thres, otherwise the best class (first maximum) when its
//      conf > conf_thres; an optional per-class filter;
//   2. candidates ordered by conf descending, ties by candidate index (box * nc + class in
//      multi-label mode, box otherwise) ascending: a stable sort of the reference's order;
//   3. only the first max_nms candidates go on; boxes are offset by class * max_wh (unless
//      agnostic) so that different classes never overlap;
//   4. greedy suppression: walking the order, a box is kept unless a kept box overlaps it with
//      IoU > iou_thres; the first max_det kept boxes are the result.
// Outputs per image: rows (x1, y1, x2, y2, conf, cls) in float, in kept order.
//
// The CPU reference and the CUDA version compute every value with the same float operations (the
// functions below, with products rounded on their own so that no fused multiply-add changes an
// IoU), so both keep exactly the same set. Half inputs are widened to float first (the reference
// computes in half, where class offsets above 65504 overflow).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "kernels/rounding.h"

namespace kestrel::kernels {

// Predictions (batch, boxes, no), contiguous; no = 5 + classes + nm: cx, cy, w, h, obj, class
// scores, then nm mask coefficients (a segmentation model's; 0 for detection).
struct NmsShape {
  int64_t batch = 0, boxes = 0, no = 0, nm = 0;
  KESTREL_HD int64_t classes() const { return no - 5 - nm; }
  // Floats per output row: x1, y1, x2, y2, conf, cls, then the nm coefficients (nms_coefficient).
  KESTREL_HD int64_t out_cols() const { return 6 + nm; }
  // Candidate slots per box: one per class in multi-label mode, else one.
  KESTREL_HD int64_t slots(bool multi_label) const { return multi_label ? classes() : 1; }
};

struct NmsParams {
  double conf_thres = 0.25;  // compared in the input's precision (the reference's float32 tensors)
  double iou_thres = 0.45;   // compared in double (torchvision: float IoU > double threshold)
  bool agnostic = false;
  bool multi_label = false;  // callers pass multi_label && classes > 1, as the reference
  int64_t max_det = 300;
  int64_t max_nms = 30000;
  float max_wh = 7680.0f;
  // classes() flags, 1 = allowed; null allows every class. Host memory for the CPU version,
  // device memory for the CUDA one.
  const uint8_t* class_allowed = nullptr;
};

// Widest max_nms the CUDA sweep keeps in shared memory (one bit per candidate).
constexpr int64_t kNmsMaxCandidates = 1 << 18;

// std::max/min semantics (the first argument when unordered), identical on host and device.
template <class A> KESTREL_HD inline A nms_max(A a, A b) { return a < b ? b : a; }
template <class A> KESTREL_HD inline A nms_min(A a, A b) { return b < a ? b : a; }

// Candidate `slot` of one box (row: its no values): whether it passes the filters, and its conf
// and class, computed in acc_t<T>.
template <class T>
KESTREL_HD inline bool nms_candidate(const T* row, int64_t slot, const NmsShape& s,
                                     const NmsParams& p, acc_t<T> conf_thres, acc_t<T>* conf,
                                     int32_t* cls) {
  using A = acc_t<T>;
  const A obj = to_acc(row[4]);
  if (!(obj > conf_thres)) return false;
  int64_t best = slot;
  A best_conf;
  if (p.multi_label) {
    best_conf = mul_rn(to_acc(row[5 + slot]), obj);
  } else {
    // torch.max: the first maximum; a NaN score makes the maximum NaN, which fails the threshold.
    best = 0;
    best_conf = mul_rn(to_acc(row[5]), obj);
    for (int64_t j = 1; j < s.classes() && best_conf == best_conf; ++j) {
      const A c = mul_rn(to_acc(row[5 + j]), obj);
      if (c > best_conf || c != c) {
        best = j;
        best_conf = c;
      }
    }
  }
  if (!(best_conf > conf_thres)) return false;
  if (p.class_allowed != nullptr && !p.class_allowed[best]) return false;
  *conf = best_conf;
  *cls = static_cast<int32_t>(best);
  return true;
}

// xywh -> xyxy, as the reference's xywh2xyxy (x - w / 2, ...).
template <class T>
KESTREL_HD inline void nms_xyxy(const T* row, acc_t<T>* box) {
  using A = acc_t<T>;
  const A x = to_acc(row[0]), y = to_acc(row[1]), hw = to_acc(row[2]) / A(2),
          hh = to_acc(row[3]) / A(2);
  box[0] = x - hw;
  box[1] = y - hh;
  box[2] = x + hw;
  box[3] = y + hh;
}

template <class A>
KESTREL_HD inline A nms_area(const A* b) {
  return mul_rn(b[2] - b[0], b[3] - b[1]);
}

// torchvision's IoU of two xyxy boxes with precomputed areas (NaN for two empty boxes, which then
// suppresses nothing, as there).
template <class A>
KESTREL_HD inline A nms_iou(const A* a, A area_a, const A* b, A area_b) {
  const A w = nms_max(A(0), nms_min(a[2], b[2]) - nms_max(a[0], b[0]));
  const A h = nms_max(A(0), nms_min(a[3], b[3]) - nms_max(a[1], b[1]));
  const A inter = mul_rn(w, h);
  return inter / (area_a + area_b - inter);
}

// Mask coefficient k of a box as the reference outputs it: scaled by the box's objectness, since
// its `x[:, 5:] *= x[:, 4:5]` multiplies every column after the objectness, the coefficients
// included (v7.0 utils/general.py). A mask's sign is unchanged, but the sigmoid of the scaled
// logits is what process_mask upsamples, so masks made at the input size depend on it.
template <class T>
KESTREL_HD inline float nms_coefficient(const T* row, const NmsShape& s, int64_t k) {
  return static_cast<float>(mul_rn(to_acc(row[5 + s.classes() + k]), to_acc(row[4])));
}

// CPU reference, float or double predictions. out: batch * max_det rows of out_cols() floats
// (rows past an image's count are left untouched); counts: batch kept counts.
void nms_cpu(DType t, const void* pred, const NmsShape& shape, const NmsParams& params,
             float* out, int32_t* counts);

// --- CUDA, in two stages around one host read of the per-image candidate counts --------------
// Stage 1: box_counts[b * boxes + i] = candidates of box i of image b, image_counts[b] = their sum
// (device int32 arrays).
void nms_count_cuda(DType t, const void* pred, const NmsShape& shape, const NmsParams& params,
                    int32_t* box_counts, int32_t* image_counts, cudaStream_t stream);

// Sizes of stage 2 for the image counts read back from stage 1.
struct NmsCudaPlan {
  int64_t candidates = 0;   // sum of the image counts
  int64_t nms_boxes = 0;    // sum of min(count, max_nms)
  int64_t mask_words = 0;   // sum of m * ceil(m / 64), m = min(count, max_nms)
  int64_t max_blocks = 0;   // max ceil(m / 64)
  size_t scan_temp_bytes = 0, sort_temp_bytes = 0;
  size_t workspace_bytes = 0;
};
NmsCudaPlan nms_cuda_plan(const NmsShape& shape, const NmsParams& params,
                          const int32_t* host_image_counts);

// Stage 2: sort, suppression and output, all on `stream`. out (batch * max_det * out_cols() floats) and
// out_counts (batch int32) are device memory; workspace holds plan.workspace_bytes.
void nms_suppress_cuda(DType t, const void* pred, const NmsShape& shape, const NmsParams& params,
                       const NmsCudaPlan& plan, const int32_t* box_counts,
                       const int32_t* image_counts, void* workspace, float* out,
                       int32_t* out_counts, cudaStream_t stream);

}  // namespace kestrel::kernels
