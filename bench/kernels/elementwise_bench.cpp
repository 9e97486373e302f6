// SiLU (forward and backward) and the residual add at YOLOv5s 640 and YOLOv5n 320 activation
// shapes (NHWC): memory-bound, so bandwidth and its share of the device's peak are what matter.
#include "bench/kernels/bench_common.h"
#include "engine/ops/elementwise.h"
#include "engine/stream.h"
#include "kernels/elementwise.h"

using namespace kestrel;

namespace {

// YOLOv5s at 640 px: layer 1's output (320x320x32) and a C3 output at P3 (80x80x128); YOLOv5n at
// 320 px: layer 1's output (160x160x16) and a C3 output at P4 (40x40x64).
struct Act {
  int64_t h, w, c;
};
constexpr Act kActs[] = {{320, 320, 32}, {80, 80, 128}, {160, 160, 16}, {40, 40, 64}};

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

// The kernel alone (an autograd backward would add the leaf-gradient copy): reads x and dy,
// writes dx.
void BM_SiluBackward(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const Act a = kActs[state.range(2)];
  const DType dt = dev.is_cpu() ? DType::F32 : DType::BF16;
  bench::Case c(state, dev, dt, str(batch, "x", a.h, "x", a.w, "x", a.c));
  if (c.skipped()) return;
  Tensor x = Tensor::full({batch, a.h, a.w, a.c}, 0.5, dt, dev);
  Tensor dy = Tensor::full({batch, a.h, a.w, a.c}, 0.25, dt, dev);
  Tensor dx = Tensor::empty_like(x);
  if (dev.is_cpu()) {
    c.run([&] {
      kernels::unary_backward_cpu(kernels::Unary::Silu, dt, x.data_ptr(), dy.data_ptr(),
                                  dx.data_ptr(), x.numel());
    });
  } else {
    const cudaStream_t stream = current_stream(dev).handle();
    c.run([&] {
      kernels::unary_backward_cuda(kernels::Unary::Silu, dt, x.data_ptr(), dy.data_ptr(),
                                   dx.data_ptr(), x.numel(), stream);
    });
  }
  c.report_bytes(3.0 * x.numel() * x.element_size());
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

// {device, batch, activation}: CUDA at batch 16 and 64; the CPU at batch 1 for YOLOv5s at 640 and
// at batch 16 for YOLOv5n at 320 (the CPU training step's shapes).
void Args(benchmark::internal::Benchmark* b) {
  for (int act = 0; act < 2; ++act) {
    b->Args({0, 1, act});
    b->Args({1, 16, act});
    b->Args({1, 64, act});
  }
  for (int act = 2; act < 4; ++act) b->Args({0, 16, act});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Silu)->Apply(Args);
BENCHMARK(BM_SiluBackward)->Apply(Args);
BENCHMARK(BM_Add)->Apply(Args);
