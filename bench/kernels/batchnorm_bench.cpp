// Batch norm at YOLOv5s's BN shapes (NHWC, 640 px): the training forward (statistics, running
// update, apply) through the op, and the backward pair (reduce, apply) through the kernels, since
// a repeated autograd backward would add the leaf-gradient copy to the timing. Memory-bound:
// bytes per iteration count the activation-sized reads and writes (the forward reads x twice and
// writes y; the backward reads dy and x twice and writes dx); per-channel traffic is negligible.
#include "bench/kernels/bench_common.h"
#include "engine/ops/batchnorm.h"
#include "engine/stream.h"
#include "kernels/batchnorm.h"

using namespace kestrel;

namespace {

// YOLOv5s at 640 px: outputs of the stem conv (P1), and of the C3 stages at P2..P5; then YOLOv5n
// at 320 px: the stem's output and a C3 stage at P4.
struct Act {
  int64_t h, w, c;
};
constexpr Act kActs[] = {{320, 320, 32}, {160, 160, 64}, {80, 80, 128}, {40, 40, 256},
                         {20, 20, 512},  {160, 160, 16}, {40, 40, 64}};
constexpr DType kDTypes[] = {DType::F32, DType::BF16};

struct Setup {
  Tensor x, dy, weight, bias, running_mean, running_var;
};

Setup make_setup(Device dev, DType dt, int64_t batch, const Act& a) {
  const Shape shape{batch, a.h, a.w, a.c};
  return {Tensor::full(shape, 0.5, dt, dev),       Tensor::full(shape, 0.25, dt, dev),
          Tensor::ones({a.c}, DType::F32, dev),    Tensor::zeros({a.c}, DType::F32, dev),
          Tensor::zeros({a.c}, DType::F32, dev),   Tensor::ones({a.c}, DType::F32, dev)};
}

void BM_BatchNormForwardTrain(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const Act a = kActs[state.range(2)];
  const DType dt = kDTypes[state.range(3)];
  bench::Case c(state, dev, dt, str(batch, "x", a.h, "x", a.w, "x", a.c));
  if (c.skipped()) return;
  const Setup s = make_setup(dev, dt, batch, a);
  c.run([&] {
    ops::batch_norm(s.x, s.weight, s.bias, s.running_mean, s.running_var, true, 0.03, 1e-3);
  });
  c.report_bytes(3.0 * s.x.numel() * s.x.element_size());
}

void BM_BatchNormBackward(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const Act a = kActs[state.range(2)];
  const DType dt = kDTypes[state.range(3)];
  bench::Case c(state, dev, dt, str(batch, "x", a.h, "x", a.w, "x", a.c));
  if (c.skipped()) return;
  const Setup s = make_setup(dev, dt, batch, a);
  const kernels::BatchNormShape shape{s.x.numel() / a.c, a.c};
  // Statistics as a training forward leaves them: [count, mean, var].
  Tensor moments = Tensor::full({kernels::moments_size(a.c)}, 1.0, DType::F32, dev);
  moments.slice(0, 0, 1).fill_(double(shape.rows));
  Tensor sums = Tensor::empty({2 * a.c}, DType::F32, dev);
  Tensor dx = Tensor::empty_like(s.x);
  const float* m = moments.data<float>();
  const float *mean = m + 1, *var = m + 1 + a.c;
  if (dev.is_cpu()) {
    c.run([&] {
      kernels::batch_norm_backward_reduce_cpu(dt, s.dy.data_ptr(), s.x.data_ptr(), shape, mean,
                                              var, 1e-3, sums.data_ptr());
      kernels::batch_norm_backward_apply_cpu(dt, s.dy.data_ptr(), s.x.data_ptr(), shape, mean,
                                             var, s.weight.data_ptr(), 1e-3, sums.data_ptr(), m,
                                             dx.data_ptr());
    });
  } else {
    Tensor workspace =
        Tensor::empty({kernels::batch_norm_workspace_floats(shape)}, DType::F32, dev);
    const cudaStream_t stream = current_stream(dev).handle();
    c.run([&] {
      kernels::batch_norm_backward_reduce_cuda(dt, s.dy.data_ptr(), s.x.data_ptr(), shape, mean,
                                               var, 1e-3, sums.data<float>(),
                                               workspace.data<float>(), stream);
      kernels::batch_norm_backward_apply_cuda(dt, s.dy.data_ptr(), s.x.data_ptr(), shape, mean,
                                              var, s.weight.data<float>(), 1e-3,
                                              sums.data<float>(), m, dx.data_ptr(), stream);
    });
  }
  c.report_bytes(5.0 * s.x.numel() * s.x.element_size());
}

// {device, batch, activation, dtype}: CUDA at batch 16 and 64 in bfloat16 and float32; the CPU
// in float32 at batch 1 for YOLOv5s at 640 and at batch 16 for YOLOv5n at 320 (the CPU training
// step's shapes).
void Args(benchmark::internal::Benchmark* b) {
  for (int act = 0; act < 5; ++act) {
    b->Args({0, 1, act, 0});
    for (int batch : {16, 64})
      for (int dt = 0; dt < 2; ++dt) b->Args({1, batch, act, dt});
  }
  for (int act = 5; act < 7; ++act) b->Args({0, 16, act, 0});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_BatchNormForwardTrain)->Apply(Args);
BENCHMARK(BM_BatchNormBackward)->Apply(Args);
