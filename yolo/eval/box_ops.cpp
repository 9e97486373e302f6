#include "yolo/eval/box_ops.h"

#include <algorithm>

namespace kestrel::yolo {
namespace {

// A CPU float32 (n, >= min_cols) tensor, contiguous rows expected by the loops below.
void check_boxes(const Tensor& t, const char* op, int64_t min_cols, bool exact) {
  KESTREL_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == DType::F32 && t.dim() == 2 &&
                    (exact ? t.size(1) == min_cols : t.size(1) >= min_cols) && t.is_contiguous(),
                op, ": expected a contiguous CPU float32 (n, ", min_cols, exact ? "" : "+",
                ") tensor, got ", t.defined() ? t.describe() : std::string("an undefined tensor"),
                "; convert with .to(Device::cpu()).to(DType::F32).contiguous()");
}

// torch.clamp semantics for a float: NaN stays NaN.
float clamp(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

}  // namespace

std::vector<LabelBox> label_boxes(const Tensor& targets, int64_t height, int64_t width) {
  std::vector<LabelBox> out;
  if (!targets.defined() || targets.numel() == 0) return out;
  KESTREL_CHECK(targets.dim() == 2 && targets.size(1) == 6, "label_boxes: targets must be (M, 6), got ",
                targets.describe());
  const std::vector<float> t = targets.to(Device::cpu()).to(DType::F32).to_vector<float>();
  const auto w_px = static_cast<float>(width), h_px = static_cast<float>(height);
  for (size_t k = 0; k + 6 <= t.size(); k += 6) {
    const float cx = t[k + 2] * w_px, cy = t[k + 3] * h_px, w = t[k + 4] * w_px, h = t[k + 5] * h_px;
    out.push_back({static_cast<int64_t>(t[k]), t[k + 1], cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
  }
  return out;
}

Tensor xywh2xyxy(const Tensor& boxes) {
  check_boxes(boxes, "xywh2xyxy", 4, true);
  Tensor out = Tensor::empty(boxes.shape(), DType::F32);
  const float* in = boxes.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    const float* b = in + 4 * i;
    o[4 * i + 0] = b[0] - b[2] / 2;
    o[4 * i + 1] = b[1] - b[3] / 2;
    o[4 * i + 2] = b[0] + b[2] / 2;
    o[4 * i + 3] = b[1] + b[3] / 2;
  }
  return out;
}

float box_iou_xyxy(const float* a, const float* b) {
  const float w = std::max(std::min(a[2], b[2]) - std::max(a[0], b[0]), 0.0f);
  const float h = std::max(std::min(a[3], b[3]) - std::max(a[1], b[1]), 0.0f);
  const float inter = w * h;
  const float area_a = (a[2] - a[0]) * (a[3] - a[1]);
  const float area_b = (b[2] - b[0]) * (b[3] - b[1]);
  return inter / (area_a + area_b - inter + 1e-7f);
}

Tensor box_iou(const Tensor& a, const Tensor& b) {
  check_boxes(a, "box_iou", 4, true);
  check_boxes(b, "box_iou", 4, true);
  const int64_t n = a.size(0), m = b.size(0);
  Tensor out = Tensor::empty({n, m}, DType::F32);
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) o[i * m + j] = box_iou_xyxy(pa + 4 * i, pb + 4 * j);
  return out;
}

void clip_boxes(const Tensor& boxes, ImageSize size) {
  check_boxes(boxes, "clip_boxes", 4, false);
  const int64_t cols = boxes.size(1);
  float* p = boxes.data<float>();
  const float w = static_cast<float>(size.width), h = static_cast<float>(size.height);
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    float* b = p + i * cols;
    b[0] = clamp(b[0], 0.0f, w);
    b[1] = clamp(b[1], 0.0f, h);
    b[2] = clamp(b[2], 0.0f, w);
    b[3] = clamp(b[3], 0.0f, h);
  }
}

void scale_boxes(const Tensor& boxes, ImageSize letterboxed, ImageSize original,
                 std::optional<RatioPad> ratio_pad) {
  check_boxes(boxes, "scale_boxes", 4, false);
  KESTREL_CHECK(letterboxed.height > 0 && letterboxed.width > 0 && original.height > 0 &&
                    original.width > 0,
                "scale_boxes: image sizes must be positive, got ", letterboxed.height, "x",
                letterboxed.width, " and ", original.height, "x", original.width);
  RatioPad rp;
  if (ratio_pad) {
    rp = *ratio_pad;
  } else {
    rp.gain = std::min(double(letterboxed.height) / double(original.height),
                       double(letterboxed.width) / double(original.width));
    rp.pad_w = (double(letterboxed.width) - double(original.width) * rp.gain) / 2;
    rp.pad_h = (double(letterboxed.height) - double(original.height) * rp.gain) / 2;
  }
  KESTREL_CHECK(rp.gain > 0, "scale_boxes: gain ", rp.gain, " must be positive");
  // torch casts the Python scalars to the tensor's float32 before subtracting and dividing.
  const float pad_w = static_cast<float>(rp.pad_w), pad_h = static_cast<float>(rp.pad_h);
  const float gain = static_cast<float>(rp.gain);
  const int64_t cols = boxes.size(1);
  float* p = boxes.data<float>();
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    float* b = p + i * cols;
    b[0] = (b[0] - pad_w) / gain;
    b[1] = (b[1] - pad_h) / gain;
    b[2] = (b[2] - pad_w) / gain;
    b[3] = (b[3] - pad_h) / gain;
  }
  clip_boxes(boxes, original);
}

}  // namespace kestrel::yolo
