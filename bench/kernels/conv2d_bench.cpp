// Convolutions at YOLOv5s's shapes (640 px input), each pass timed on its own: forward,
// backward-data, backward-filter. Compute-bound, so the figure is FLOP/s against the device's
// float32 or tensor-core peak; every pass does 2 * N * OH * OW * O * KH * KW * C FLOPs. The label
// names the implementation: on CUDA the cuDNN algorithm chosen (algo=<name>/<math type>), on the
// CPU the oneDNN kernel float32 runs (e.g. algo=brgconv:avx512_core).
#include "bench/kernels/bench_common.h"
#include "engine/ops/conv.h"

using namespace kestrel;
using kernels::ConvPass;

namespace {

struct ConvLayer {
  int64_t hw, c, o, k, stride, pad;  // square input hw x hw x c, o filters of k x k
};
constexpr ConvLayer kLayers[] = {
    {640, 3, 32, 6, 2, 2},    // layer 0: the 6x6 stem
    {320, 32, 64, 3, 2, 1},   // layer 1: first downsampling 3x3
    {80, 128, 128, 1, 1, 0},  // layer 4: the C3's output 1x1 at P3
    {40, 256, 512, 3, 2, 1},  // layer 7: downsampling 3x3 to P5
    {20, 256, 256, 3, 1, 1},  // layer 8: the C3 bottleneck's 3x3 at P5
};

void run_pass(benchmark::State& state, ConvPass pass) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const ConvLayer& l = kLayers[state.range(2)];
  const DType dt = state.range(3) ? DType::BF16 : DType::F32;
  const int64_t out = (l.hw + 2 * l.pad - l.k) / l.stride + 1;
  const std::string shape = str(batch, "x", l.hw, "x", l.hw, "x", l.c, "_to_", l.o, "_k", l.k,
                                "s", l.stride, "p", l.pad);
  bench::Case c(state, dev, dt, shape);
  if (c.skipped()) return;
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = l.stride;
  p.pad_h = p.pad_w = l.pad;
  // Small constants: timing does not depend on the values, and sums stay far from overflow.
  Tensor x = Tensor::full({batch, l.hw, l.hw, l.c}, 0.01, dt, dev);
  Tensor w = Tensor::full({l.o, l.k, l.k, l.c}, 0.01, dt, dev);
  Tensor dy = Tensor::full({batch, out, out, l.o}, 0.01, dt, dev);
  switch (pass) {
    case ConvPass::Forward: c.run([&] { ops::conv2d(x, w, Tensor(), p); }); break;
    case ConvPass::BackwardData:
      c.run([&] { ops::conv2d_backward_data(dy, w, x.shape(), p); });
      break;
    case ConvPass::BackwardFilter:
      c.run([&] { ops::conv2d_backward_filter(x, dy, w.shape(), p); });
      break;
  }
  c.report_flops(2.0 * batch * out * out * l.o * l.k * l.k * l.c);
  c.add_label("algo", ops::conv2d_algorithm(pass, x, w, p));
}

void BM_Conv2dForward(benchmark::State& state) { run_pass(state, ConvPass::Forward); }
void BM_Conv2dBackwardData(benchmark::State& state) { run_pass(state, ConvPass::BackwardData); }
void BM_Conv2dBackwardFilter(benchmark::State& state) {
  run_pass(state, ConvPass::BackwardFilter);
}

// {device, batch, layer, bf16}: CUDA at batch 16 and 64 in float32 and bfloat16; the CPU at
// batch 1 and 4 in float32 (a 2-core machine; batch 4 at 640 px does the FLOPs of a training
// step's batch 16 at 320 px).
void Args(benchmark::internal::Benchmark* b) {
  for (int layer = 0; layer < int(std::size(kLayers)); ++layer) {
    for (int batch : {1, 4}) b->Args({0, batch, layer, 0});
    for (int batch : {16, 64})
      for (int bf16 : {0, 1}) b->Args({1, batch, layer, bf16});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Conv2dForward)->Apply(Args);
BENCHMARK(BM_Conv2dBackwardData)->Apply(Args);
BENCHMARK(BM_Conv2dBackwardFilter)->Apply(Args);
