// SiLU and the residual add at YOLOv5s activation shapes (NHWC): memory-bound, so bandwidth and
// its share of the device's peak are what matter.
#include "bench/kernels/bench_common.h"
#include "engine/ops/elementwise.h"

using namespace kestrel;

namespace {

// YOLOv5s at 640 px: layer 1's output (320x320x32) and a C3 output at P3 (80x80x128).
struct Act {
  int64_t h, w, c;
};
constexpr Act kActs[] = {{320, 320, 32}, {80, 80, 128}};

void BM_Silu(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const Act a = kActs[state.range(2)];
  const DType dt = dev.is_cpu() ? DType::F32 : DType::BF16;
  bench::Case c(state, dev, dt, str(batch, "x", a.h, "x", a.w, "x", a.c));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({batch, a.h, a.w, a.c}, dt, dev);
  c.run([&] { ops::silu(x); });
  c.report_bytes(2.0 * x.numel() * x.element_size());
}

void BM_Add(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const Act a = kActs[state.range(2)];
  const DType dt = dev.is_cpu() ? DType::F32 : DType::BF16;
  bench::Case c(state, dev, dt, str(batch, "x", a.h, "x", a.w, "x", a.c));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({batch, a.h, a.w, a.c}, dt, dev);
  Tensor y = Tensor::ones({batch, a.h, a.w, a.c}, dt, dev);
  c.run([&] { ops::add(x, y); });
  c.report_bytes(3.0 * x.numel() * x.element_size());
}

// {device, batch, activation}: CUDA at batch 16 and 64; the CPU at batch 1 (a 2-core machine).
void Args(benchmark::internal::Benchmark* b) {
  for (int act = 0; act < 2; ++act) {
    b->Args({0, 1, act});
    b->Args({1, 16, act});
    b->Args({1, 64, act});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Silu)->Apply(Args);
BENCHMARK(BM_Add)->Apply(Args);
