// The segmentation loss's mask term at a 640 training shape: 160x160 prototypes with nm 32 and 64
// positives per image (a level's matches for ~7 objects, 3 anchors, 3 cells), boxes of 10 to 60
// prototype pixels, overlap masks: forward and backward of ops::mask_loss. Compute-bound (each
// inside pixel costs a 32-term dot product in the forward and two in each backward pass, with the
// accumulations): reported as FLOP/s, 10 nm per inside pixel.
#include <cmath>
#include <vector>

#include "bench/kernels/bench_common.h"
#include "engine/ops/mask_loss.h"

using namespace kestrel;

namespace {

void BM_MaskLossForwardBackward(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  const int64_t mh = 160, mw = 160, nm = 32, per_image = 64, P = s.batch * per_image;
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", mh, "x", mw, "x", nm));
  if (c.skipped()) return;
  std::vector<int32_t> row(P), image(P), gt_row(P);
  std::vector<float> box(4 * P), area(P), label(P);
  double inside = 0;
  for (int64_t p = 0; p < P; ++p) {
    row[p] = static_cast<int32_t>(p);
    image[p] = static_cast<int32_t>(p / per_image);
    gt_row[p] = image[p];
    label[p] = float(1 + p % 7);
    const float w = float(10 + (p * 37) % 50), h = float(10 + (p * 53) % 50);
    const float x = float((p * 71) % (mw - 60) + 30), y = float((p * 29) % (mh - 60) + 30);
    const float b[4] = {x - w / 2, y - h / 2, x + w / 2, y + h / 2};
    std::copy(b, b + 4, box.begin() + 4 * p);
    area[p] = w * h / float(mh * mw);
    inside += double(w) * double(h);
  }
  const Device d = s.device;
  const ops::MaskPositives pos{Tensor::from_vector(row, {P}).to(d),
                               Tensor::from_vector(image, {P}).to(d),
                               Tensor::from_vector(box, {P, 4}).to(d),
                               Tensor::from_vector(area, {P}).to(d),
                               Tensor::from_vector(gt_row, {P}).to(d),
                               Tensor::from_vector(label, {P}).to(d)};
  const Tensor coef = Tensor::zeros({P, nm}, s.dtype, d).set_requires_grad();
  const Tensor protos = Tensor::zeros({s.batch, mh, mw, nm}, s.dtype, d).set_requires_grad();
  const Tensor masks = Tensor::zeros({s.batch, mh, mw}, DType::U8, d);
  c.run([&] {
    const Tensor loss = ops::mask_loss(coef, 0, protos, pos, masks, true);
    loss.backward(Tensor::ones({P}, loss.dtype(), d));
  });
  c.report_flops(10.0 * double(nm) * inside);
}

// {device, batch, dtype}: the CPU at batch 1 in float32; CUDA at batch 16 in float32 and bfloat16.
void Args(benchmark::internal::Benchmark* b) {
  b->Args({0, 1, 0});
  for (int64_t dtype : {0, 1}) b->Args({1, 16, dtype});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_MaskLossForwardBackward)->Apply(Args);
