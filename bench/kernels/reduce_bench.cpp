// Sums at a YOLOv5s activation shape (the 80x80x128 P3 feature map, NHWC): per-channel sums over
// N*H*W, as batch norm statistics and bias gradients need them (reduced dims leading: read in
// place by the columns kernel), and a full sum (as for a loss: block chunks, then a second pass
// over the partials). Memory-bound: bytes read and their share of peak bandwidth are what matter.
#include "bench/kernels/bench_common.h"
#include "engine/ops/reduce.h"

using namespace kestrel;

namespace {

constexpr int64_t kH = 80, kW = 80, kC = 128;

void BM_SumPerChannel(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", kH, "x", kW, "x", kC));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({s.batch, kH, kW, kC}, s.dtype, s.device);
  c.run([&] { ops::sum(x, {0, 1, 2}); });
  c.report_bytes(static_cast<double>(x.numel() + kC) * x.element_size());
}

void BM_SumAll(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", kH, "x", kW, "x", kC));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({s.batch, kH, kW, kC}, s.dtype, s.device);
  c.run([&] { ops::sum_all(x); });
  c.report_bytes(static_cast<double>(x.numel() + 1) * x.element_size());
}

// {device, batch, dtype}: CUDA at batch 16 and 64 in float32 and bfloat16; the CPU at batch 1 in
// float32 (its reference kernels take float and double only).
void Args(benchmark::internal::Benchmark* b) {
  b->Args({0, 1, 0});
  for (int64_t batch : {16, 64})
    for (int64_t dtype : {0, 1}) b->Args({1, batch, dtype});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_SumPerChannel)->Apply(Args);
BENCHMARK(BM_SumAll)->Apply(Args);
