#include "yolo/eval/augmented_inference.h"

#include <algorithm>
#include <cmath>

#include "engine/ops/concat.h"
#include "engine/ops/launch.h"
#include "kernels/tta.h"

namespace kestrel::yolo {

const std::vector<TtaPass>& tta_passes() {
  static const std::vector<TtaPass> passes = {{1.0, false}, {0.83, true}, {0.67, false}};
  return passes;
}

ScaledSize tta_scaled_size(int64_t h, int64_t w, double ratio, int64_t gs) {
  if (ratio == 1.0) return {h, w, h, w};
  // Python's int() and math.ceil on the same double products as the reference's.
  const double sh = static_cast<double>(h) * ratio, sw = static_cast<double>(w) * ratio;
  const auto g = static_cast<double>(gs);
  return {static_cast<int64_t>(sh), static_cast<int64_t>(sw), static_cast<int64_t>(std::ceil(sh / g)) * gs,
          static_cast<int64_t>(std::ceil(sw / g)) * gs};
}

Tensor tta_scale_image(const Tensor& x_, double ratio, int64_t gs, bool flip_lr) {
  KESTREL_CHECK(x_.dim() == 4, "tta_scale_image: expects NHWC images, got ", x_.describe());
  if (ratio == 1.0 && !flip_lr) return x_;
  const Tensor x = x_.contiguous();
  const ScaledSize size = tta_scaled_size(x.size(1), x.size(2), ratio, gs);
  KESTREL_CHECK(size.h > 0 && size.w > 0, "tta_scale_image: ", x.size(1), "x", x.size(2), " scaled by ", ratio,
                " leaves no pixels");
  kernels::TtaScaleShape s;
  s.n = x.size(0);
  s.in_h = x.size(1);
  s.in_w = x.size(2);
  s.c = x.size(3);
  s.out_h = size.h;
  s.out_w = size.w;
  s.padded_h = size.padded_h;
  s.padded_w = size.padded_w;
  s.flip_lr = flip_lr;
  Tensor y = Tensor::empty({s.n, s.padded_h, s.padded_w, s.c}, x.dtype(), x.device());
  ops::launch(
      x.device(), [&] { kernels::tta_scale_cpu(x.dtype(), x.data_ptr(), y.data_ptr(), s); },
      [&](cudaStream_t stream) {
        kernels::tta_scale_cuda(x.dtype(), x.data_ptr(), y.data_ptr(), s, stream);
      });
  return y;
}

Tensor tta_descale(const Tensor& boxes, double scale, bool flip_lr, int64_t img_w) {
  KESTREL_CHECK(boxes.dim() == 3 && boxes.size(2) >= 4, "tta_descale: expects (batch, boxes, no >= 4), got ",
                boxes.describe());
  if (scale == 1.0 && !flip_lr) return boxes;  // x / 1 is x
  Tensor p = boxes.is_contiguous() ? boxes.clone() : boxes.contiguous();
  const int64_t rows = p.size(0) * p.size(1), no = p.size(2);
  const auto w = static_cast<double>(img_w);
  ops::launch(
      p.device(), [&] { kernels::tta_descale_cpu(p.dtype(), p.data_ptr(), rows, no, scale, flip_lr, w); },
      [&](cudaStream_t s) {
        kernels::tta_descale_cuda(p.dtype(), p.data_ptr(), rows, no, scale, flip_lr, w, s);
      });
  return p;
}

std::vector<Tensor> tta_clip(std::vector<Tensor> passes, int64_t nl) {
  KESTREL_CHECK(!passes.empty() && nl >= 1, "tta_clip: no passes");
  int64_t g = 0;  // grid cells of all levels, in units of the coarsest level's
  for (int64_t k = 0, p = 1; k < nl; ++k, p *= 4) g += p;
  const int64_t coarsest = static_cast<int64_t>(std::pow(4, nl - 1));
  Tensor& first = passes.front();
  const int64_t cut_first = first.size(1) / g;  // the first pass's last level
  // As Python's y[:, :-i]: i = 0 would leave nothing (never for a real image: every level has a cell).
  first = first.slice(1, 0, cut_first == 0 ? 0 : first.size(1) - cut_first);
  Tensor& last = passes.back();
  const int64_t cut_last = last.size(1) / g * coarsest;  // the last pass's first level
  last = last.slice(1, std::min(cut_last, last.size(1)), last.size(1));
  return passes;
}

Tensor predict_augmented(DetectionModel& model, const Tensor& x) {
  const auto& strides = model.strides();
  const auto gs = static_cast<int64_t>(*std::max_element(strides.begin(), strides.end()));
  const int64_t img_w = x.size(2);
  std::vector<Tensor> passes;
  for (const TtaPass& pass : tta_passes()) {
    const Tensor xi = tta_scale_image(x, pass.scale, gs, pass.flip_lr);
    passes.push_back(tta_descale(model.predict(xi).boxes, pass.scale, pass.flip_lr, img_w));
  }
  return ops::concat(tta_clip(std::move(passes), model.detect().nl), 1);
}

}  // namespace kestrel::yolo
