// The fused multi-tensor training-step kernels over a YOLOv5s-sized parameter set: ~7.2 M
// float32 values in 60 conv-weight tensors of 120 k elements and 120 small BN/bias tensors of
// 256, so both the streaming bandwidth and the per-tensor overhead show. Memory-bound: bytes per
// iteration count each buffer read or written once (SGD: p, g, buf read, p, buf written = 5
// values; Adam: 7; the norm: 1 read; clip-scale and unscale: 2; EMA: 3; zeroing: 1 written).
// The per-step values (lr and momentum, Adam's step counts, the EMA's count) live in memory of
// the benchmarked device, as the Optimizer keeps them; Adam and the EMA advance their counts.
#include "bench/kernels/bench_common.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "kernels/optim.h"

using namespace kestrel;

namespace {

std::vector<int64_t> param_sizes() {
  std::vector<int64_t> s(60, 120000);
  s.insert(s.end(), 120, 256);
  return s;
}

int64_t total_elements() {
  int64_t n = 0;
  for (int64_t v : param_sizes()) n += v;
  return n;
}

// `depth` buffers per parameter, filled with small values, and the kernel list over them.
struct Buffers {
  std::vector<std::vector<Tensor>> cols;
  kernels::TensorList list;
  Tensor counts;  // one int64 step count per tensor
  Buffers(int depth, Device dev) : cols(depth), list(depth) {
    counts = Tensor::zeros({static_cast<int64_t>(param_sizes().size())}, DType::I64, dev);
    int64_t* count = counts.data<int64_t>();
    for (int64_t n : param_sizes()) {
      std::array<void*, 4> p{};
      for (int d = 0; d < depth; ++d) {
        cols[d].push_back(Tensor::full({n}, 0.01 * (d + 1), DType::F32, dev));
        p[d] = cols[d].back().data_ptr();
      }
      switch (depth) {
        case 1: list.add({p[0]}, n); break;
        case 2: list.add({p[0], p[1]}, n); break;
        case 3: list.add({p[0], p[1], p[2]}, n); break;
        default: list.add({p[0], p[1], p[2], p[3]}, n, count++);
      }
    }
  }
};

enum class Op { Sgd, Adam, Norm, Unscale, Ema, Zero };
constexpr int kOps = 6;
constexpr double kValuesMoved[] = {5, 7, 1, 2, 3, 1};
constexpr int kDepth[] = {3, 4, 1, 1, 2, 1};
constexpr const char* kNames[] = {"sgd", "adamw", "norm", "unscale", "ema", "zero"};

void BM_Optim(benchmark::State& state) {
  const Device dev = bench::device_from_arg(state.range(0));
  const auto op = static_cast<Op>(state.range(1));
  // The shape field names the operation too (bench_main prints no free-form label).
  bench::Case c(state, dev, DType::F32,
                str(kNames[state.range(1)], ":", param_sizes().size(), "x", total_elements()));
  if (c.skipped()) return;
  Buffers b(kDepth[state.range(1)], dev);
  const cudaStream_t s = dev.is_cuda() ? current_stream(dev).handle() : nullptr;
  Tensor work, out;
  if (op == Op::Norm || op == Op::Unscale) {
    work = Tensor::empty({kernels::norm_partial_count(b.list)}, DType::F64, dev);
    out = Tensor::zeros({}, DType::F32, dev);
  }
  const Tensor hyper = Tensor::from_vector<double>({1e-3, 0.937}, {2}, dev);
  const auto* h = reinterpret_cast<const kernels::GroupHyper*>(hyper.data<double>());
  const Tensor ema_updates = Tensor::zeros({1}, DType::I64, dev);
  const kernels::SgdConfig sgd{5e-4, true};
  const kernels::AdamConfig adam{0.999, 1e-8, 5e-4, true};
  const kernels::EmaRamp ramp{0.9999, 2000.0};
  c.run([&] {
    switch (op) {
      case Op::Sgd:
        if (dev.is_cuda()) kernels::sgd_step_cuda(DType::F32, b.list, h, sgd, s);
        else kernels::sgd_step_cpu(DType::F32, b.list, h, sgd);
        break;
      case Op::Adam:
        if (dev.is_cuda()) kernels::adam_step_cuda(DType::F32, b.list, h, adam, s);
        else kernels::adam_step_cpu(DType::F32, b.list, h, adam);
        break;
      case Op::Norm:
        if (dev.is_cuda())
          kernels::global_norm_cuda(DType::F32, b.list, work.data<double>(), out.data<float>(), s);
        else
          benchmark::DoNotOptimize(kernels::global_norm_cpu(DType::F32, b.list));
        break;
      case Op::Unscale:
        if (dev.is_cuda()) kernels::scale_cuda(DType::F32, b.list, 1.0, out.data<float>(), s);
        else benchmark::DoNotOptimize(kernels::scale_cpu(DType::F32, b.list, 1.0));
        break;
      case Op::Ema:
        if (dev.is_cuda())
          kernels::ema_update_cuda(DType::F32, b.list, ramp, ema_updates.data<int64_t>(), s);
        else
          kernels::ema_update_cpu(DType::F32, b.list, ramp, ema_updates.data<int64_t>());
        break;
      case Op::Zero:
        if (dev.is_cuda()) kernels::zero_cuda(DType::F32, b.list, s);
        else kernels::zero_cpu(DType::F32, b.list);
        break;
    }
  });
  c.report_bytes(kValuesMoved[state.range(1)] * 4.0 * total_elements());
}

void Args(benchmark::internal::Benchmark* b) {
  for (int dev = 0; dev < 2; ++dev)
    for (int op = 0; op < kOps; ++op) b->Args({dev, op});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Optim)->Apply(Args);
