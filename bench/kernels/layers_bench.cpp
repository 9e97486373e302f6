// The data-movement layers of YOLOv5s at 640 px (NHWC): the head's Concats, the Upsample, SPPF's
// max pools (forward and the backward gather), and turning an image batch into network input.
// All memory-bound: bytes moved and their share of the device's peak bandwidth are what matter.
#include "bench/kernels/bench_common.h"
#include "engine/ops/concat.h"
#include "engine/ops/layout.h"
#include "engine/ops/pool.h"
#include "engine/ops/upsample.h"
#include "engine/stream.h"
#include "kernels/maxpool.h"

using namespace kestrel;

namespace {

struct Act {
  int64_t h, w, c;
};


std::string nhwc(int64_t n, const Act& a) { return str(n, "x", a.h, "x", a.w, "x", a.c); }

// Concat of two equal tensors on channels: the head's P3 (80x80x128 + 80x80x128, layer 17's
// input) and P4 (40x40x256 + 40x40x256, layer 20's input).
constexpr Act kConcatInputs[] = {{80, 80, 128}, {40, 40, 256}};

void BM_Concat(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t n = state.range(1);
  const DType dt = bench::dtype_from_arg(state.range(2));
  const Act a = kConcatInputs[state.range(3)];
  bench::Case c(state, dev, dt, str(nhwc(n, a), "+", nhwc(n, a)));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({n, a.h, a.w, a.c}, dt, dev),
         y = Tensor::ones({n, a.h, a.w, a.c}, dt, dev);
  c.run([&] { ops::concat({x, y}, -1); });
  c.report_bytes(4.0 * x.numel() * x.element_size());  // read both, write twice their size
}

// Layer 10's output 20x20x256 upsampled to 40x40 (layer 11).
constexpr Act kUpsampleInput{20, 20, 256};

void BM_Upsample(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t n = state.range(1);
  const DType dt = bench::dtype_from_arg(state.range(2));
  const Act a = kUpsampleInput;
  bench::Case c(state, dev, dt, nhwc(n, a));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({n, a.h, a.w, a.c}, dt, dev);
  c.run([&] { ops::upsample_nearest2x(x); });
  c.report_bytes(5.0 * x.numel() * x.element_size());  // read x, write 4x
}

// SPPF (layer 9) pools its 20x20x256 input with k5 s1 p2, three times in a row.
constexpr Act kSppfInput{20, 20, 256};

void BM_SppfMaxPool(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t n = state.range(1);
  const DType dt = bench::dtype_from_arg(state.range(2));
  const Act a = kSppfInput;
  bench::Case c(state, dev, dt, nhwc(n, a));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({n, a.h, a.w, a.c}, dt, dev);
  c.run([&] { ops::max_pool2d(x, 5, 1, 2); });
  c.report_bytes(2.0 * x.numel() * x.element_size());
}

// The backward gather alone (kernel entry points: the op would add autograd's bookkeeping):
// reads dy and the one-byte window indices of up to 25 windows per input, writes dx.
void BM_SppfMaxPoolBackward(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t n = state.range(1);
  const DType dt = bench::dtype_from_arg(state.range(2));
  const Act a = kSppfInput;
  bench::Case c(state, dev, dt, nhwc(n, a));
  if (c.skipped()) return;
  kernels::PoolShape s;
  s.n = n;
  s.h = s.out_h = a.h;
  s.w = s.out_w = a.w;
  s.c = a.c;
  s.kernel = 5;
  s.stride = 1;
  s.pad = 2;
  Tensor dy = Tensor::ones({n, a.h, a.w, a.c}, dt, dev), dx = Tensor::empty_like(dy);
  Tensor window = Tensor::zeros(dy.shape(), DType::U8, dev);
  const uint8_t* w = window.data<uint8_t>();
  c.run([&] {
    if (dev.is_cpu())
      kernels::maxpool2d_backward_cpu(dt, dy.data_ptr(), w, dx.data_ptr(), s);
    else
      kernels::maxpool2d_backward_cuda(dt, dy.data_ptr(), w, dx.data_ptr(), s,
                                       current_stream(dev).handle());
  });
  c.report_bytes(dy.numel() * (2.0 * dy.element_size() + 1.0));
}

// A 640x640 RGB batch: NCHW -> NHWC, and u8 NHWC images to scaled network input.
void BM_NchwToNhwc(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t n = state.range(1);
  const DType dt = bench::dtype_from_arg(state.range(2));
  bench::Case c(state, dev, dt, str(n, "x3x640x640"));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({n, 3, 640, 640}, dt, dev);
  c.run([&] { ops::nchw_to_nhwc(x); });
  c.report_bytes(2.0 * x.numel() * x.element_size());
}

void BM_ImagesToInput(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t n = state.range(1);
  const DType dt = bench::dtype_from_arg(state.range(2));
  bench::Case c(state, dev, dt, str(n, "x640x640x3"));
  if (c.skipped()) return;
  Tensor images = Tensor::full({n, 640, 640, 3}, 128, DType::U8, dev);
  c.run([&] { ops::images_to_input(images, dt); });
  c.report_bytes(images.numel() * (1.0 + dtype_size(dt)));
}

// {device, batch, dtype}: CUDA at batch 16 and 64 in float32 and bfloat16; the CPU at batch 1 in
// float32 (a 2-core machine).
void Args(benchmark::internal::Benchmark* b) {
  b->Args({0, 1, 0});
  for (int64_t batch : {16, 64})
    for (int64_t dtype : {0, 1}) b->Args({1, batch, dtype});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

// The same with a fourth argument: which concat.
void ConcatArgs(benchmark::internal::Benchmark* b) {
  for (int64_t which : {0, 1}) {
    b->Args({0, 1, 0, which});
    for (int64_t batch : {16, 64})
      for (int64_t dtype : {0, 1}) b->Args({1, batch, dtype, which});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Concat)->Apply(ConcatArgs);
BENCHMARK(BM_Upsample)->Apply(Args);
BENCHMARK(BM_SppfMaxPool)->Apply(Args);
BENCHMARK(BM_SppfMaxPoolBackward)->Apply(Args);
BENCHMARK(BM_NchwToNhwc)->Apply(Args);
BENCHMARK(BM_ImagesToInput)->Apply(Args);
