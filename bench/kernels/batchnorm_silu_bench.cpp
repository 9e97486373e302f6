// The fused batch norm + SiLU of the CPU training step (kernels/batchnorm_silu.h) at YOLOv5n 320
// and YOLOv5s 640 activation shapes, next to what it replaces run back to back: BN forward
// (statistics, apply) then SiLU, and SiLU backward then BN's reduce and apply. Bytes per iteration
// count activation-sized reads and writes. Fused forward: x twice, y once. Fused backward: dy and
// x, then g and x, writing g and dx. The separate ops move more: forward x twice, z written, read
// and y written (5); backward z and dy read, g written, then g and x twice, dx written (7). On
// bfloat16 activations (the CPU's --amp bf16; mode 2) the fused ops move 2-byte values: forward x
// twice and y once, backward dy and x twice (g recomputed) and dx once (5).
#include "bench/kernels/bench_common.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/batchnorm_silu.h"
#include "engine/ops/elementwise.h"
#include "engine/random.h"
#include "kernels/batchnorm.h"
#include "kernels/batchnorm_silu.h"
#include "kernels/elementwise.h"

using namespace kestrel;

namespace {

struct Act {
  int64_t batch, h, w, c;
};
// YOLOv5n at 320, batch 16: the stem's output and a C3 stage at P4; YOLOv5s at 640, batch 1: the
// stem's output and a C3 output at P3.
constexpr Act kActs[] = {{16, 160, 160, 16}, {16, 40, 40, 64}, {1, 320, 320, 32}, {1, 80, 80, 128}};

struct Setup {
  Tensor x, dy, weight, bias, running_mean, running_var, moments, sums, g, dx;
  kernels::BatchNormShape shape;
};

// Activations of a trained network's conv outputs: spread around zero, so that SiLU's both
// regimes are exercised.
Tensor random_activation(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  gen.fill_uniform(t, -3.0, 3.0);
  return t;
}

Setup make_setup(const Act& a) {
  const Shape shape{a.batch, a.h, a.w, a.c};
  Setup s;
  s.x = random_activation(shape, 1);
  s.dy = random_activation(shape, 2);
  s.weight = Tensor::ones({a.c});
  s.bias = Tensor::zeros({a.c});
  s.running_mean = Tensor::zeros({a.c});
  s.running_var = Tensor::ones({a.c});
  s.shape = {s.x.numel() / a.c, a.c};
  s.moments = ops::bn_steps::local_moments(s.x);
  s.sums = Tensor::empty({2 * a.c});
  s.g = Tensor::empty_like(s.x);
  s.dx = Tensor::empty_like(s.x);
  return s;
}

std::string label(const Act& a) { return str(a.batch, "x", a.h, "x", a.w, "x", a.c); }

const char* mode_name(int64_t mode) { return mode == 0 ? " separate" : mode == 1 ? " fused" : " fused bf16"; }

// mode: 0 = BN then SiLU as separate ops, 1 = the fused op, 2 = the fused op on bfloat16 activations.
void BM_BatchNormSiluForwardTrain(benchmark::State& state) {
  const Act a = kActs[state.range(0)];
  const bool fused = state.range(1) != 0, bf16 = state.range(1) == 2;
  bench::Case c(state, Device::cpu(), DType::F32, label(a) + mode_name(state.range(1)));
  if (c.skipped()) return;
  Setup s = make_setup(a);
  if (bf16) s.x = s.x.to(DType::BF16);
  c.run([&] {
    if (fused)
      ops::batch_norm_silu(s.x, s.weight, s.bias, s.running_mean, s.running_var, true, 0.03, 1e-3);
    else
      ops::silu(ops::batch_norm(s.x, s.weight, s.bias, s.running_mean, s.running_var, true, 0.03,
                                1e-3));
  });
  c.report_bytes((fused ? 3.0 : 5.0) * s.x.numel() * s.x.element_size());
}

void BM_BatchNormSiluBackward(benchmark::State& state) {
  const Act a = kActs[state.range(0)];
  const bool fused = state.range(1) != 0, bf16 = state.range(1) == 2;
  bench::Case c(state, Device::cpu(), DType::F32, label(a) + mode_name(state.range(1)));
  if (c.skipped()) return;
  Setup s = make_setup(a);
  const float* m = s.moments.data<float>();
  const float *mean = m + 1, *var = m + 1 + a.c;
  const DType t = DType::F32;
  const Tensor dy16 = s.dy.to(DType::BF16), x16 = s.x.to(DType::BF16), dx16 = Tensor::empty_like(x16);
  auto bits = [](const Tensor& b) { return static_cast<uint16_t*>(b.data_ptr()); };
  c.run([&] {
    if (bf16) {
      kernels::batch_norm_silu_backward_cpu_bf16(bits(dy16), bits(x16), s.shape, mean, var, s.weight.data<float>(),
                                                 s.bias.data<float>(), 1e-3, m, s.sums.data<float>(), bits(dx16));
    } else if (fused) {
      kernels::batch_norm_silu_backward_reduce_cpu(t, s.dy.data_ptr(), s.x.data_ptr(), s.shape,
                                                   mean, var, s.weight.data_ptr(),
                                                   s.bias.data_ptr(), 1e-3, s.g.data_ptr(),
                                                   s.sums.data_ptr());
      kernels::batch_norm_backward_apply_cpu(t, s.g.data_ptr(), s.x.data_ptr(), s.shape, mean, var,
                                             s.weight.data_ptr(), 1e-3, s.sums.data_ptr(), m,
                                             s.g.data_ptr());
    } else {
      // The SiLU backward reads z; x stands in for it (the same bytes and arithmetic).
      kernels::unary_backward_cpu(kernels::Unary::Silu, t, s.x.data_ptr(), s.dy.data_ptr(),
                                  s.g.data_ptr(), s.x.numel());
      kernels::batch_norm_backward_reduce_cpu(t, s.g.data_ptr(), s.x.data_ptr(), s.shape, mean,
                                              var, 1e-3, s.sums.data_ptr());
      kernels::batch_norm_backward_apply_cpu(t, s.g.data_ptr(), s.x.data_ptr(), s.shape, mean, var,
                                             s.weight.data_ptr(), 1e-3, s.sums.data_ptr(), m,
                                             s.dx.data_ptr());
    }
  });
  c.report_bytes(bf16 ? 5.0 * s.x.numel() * 2 : (fused ? 6.0 : 7.0) * s.x.numel() * sizeof(float));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int act = 0; act < int(std::size(kActs)); ++act)
    for (int mode : {0, 1, 2}) b->Args({act, mode});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_BatchNormSiluForwardTrain)->Apply(Args);
BENCHMARK(BM_BatchNormSiluBackward)->Apply(Args);
