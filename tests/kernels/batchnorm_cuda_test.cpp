// CUDA batch norm against the CPU reference: forward, running statistics and backward for float32,
// bfloat16 and float16 activations (parameters and statistics float32), at shapes that exercise
// partial channel tiles, single channels and the capped row-block count; plus large-mean accuracy,
// the moments merge and run-to-run determinism.
//
// Both sides see the same (already rounded) activations; the CPU computes in double, CUDA in float.
// Tolerances:
//  - float32 outputs: 1e-5 relative and absolute. The CUDA statistics carry ~1e-6 relative error
//    (float sums of shifted values), the output a few float roundings (emulated: 3% of the bound).
//  - bfloat16 / float16 outputs: the CUDA result is rounded to 8 / 11 significant bits, up to half
//    an ulp (2^-8 / 2^-11 of its magnitude) from the float32 reference, and the float32 arithmetic
//    before the rounding may tip it further: rtol of one ulp, 2^-7 / 2^-10, keeps a 2x margin (a
//    host emulation of these kernels peaked at half of it), atol 1e-4 covers values near zero.
//  - per-channel sums (dweight, dbias): float partial sums of <= a few hundred terms, then fixed
//    trees. Their rounding grows like eps * |term| * sqrt(M * terms per thread) ~ 3e-4 at
//    M = 2e5; atol 1e-5 * sqrt(M) leaves a wide margin (emulated: 3% of it) and still fails on
//    any wrong term.
#include <cmath>

#include "engine/ops/batchnorm.h"
#include "engine/stream.h"
#include "kernels/batchnorm.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

constexpr double kEps = 1e-3, kMomentum = 0.03;

struct Case {
  DType dtype;
  double rtol;  // of an output stored in the dtype
};

// Activations and output gradients in the case dtype, parameters and buffers float32, on the CPU.
struct Inputs {
  Tensor x, dy, weight, bias, running_mean, running_var;
};

Inputs make_inputs(const Shape& shape, DType dtype, uint64_t seed) {
  const int64_t c = shape[3];
  return {random_tensor(shape, seed, DType::F32, -2, 3).to(dtype),
          random_tensor(shape, seed + 1, DType::F32, -1, 1).to(dtype),
          random_tensor({c}, seed + 2, DType::F32, 0.5, 1.5),
          random_tensor({c}, seed + 3, DType::F32, -0.5, 0.5),
          random_tensor({c}, seed + 4, DType::F32, -1, 1),
          random_tensor({c}, seed + 5, DType::F32, 0.5, 2)};
}

struct Result {
  Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// A fresh copy on `device`; on the CPU activations become float32 (exactly: they were rounded).
Tensor fresh(const Tensor& t, Device device) {
  return device.is_cpu() ? t.to(DType::F32).clone().detach() : t.to(device).detach();
}

Result run(const Inputs& in, Device device, bool training) {
  Tensor x = fresh(in.x, device).set_requires_grad();
  Tensor w = fresh(in.weight, device).set_requires_grad();
  Tensor b = fresh(in.bias, device).set_requires_grad();
  Tensor rm = fresh(in.running_mean, device), rv = fresh(in.running_var, device);
  Tensor y = ops::batch_norm(x, w, b, rm, rv, training, kMomentum, kEps);
  y.backward(fresh(in.dy, device));
  return {y, x.grad(), w.grad(), b.grad(), rm, rv};
}

void expect_parity(const Inputs& in, const Case& c, bool training) {
  const Result gpu = run(in, Device::cuda(0), training);
  const Result cpu = run(in, Device::cpu(), training);
  const double sums_atol = 1e-5 * std::sqrt(double(in.x.numel() / in.x.size(3)));
  const double atol = c.dtype == DType::F32 ? 1e-5 : 1e-4;
  EXPECT_TRUE(all_close(gpu.y, cpu.y, atol, c.rtol)) << "y";
  EXPECT_TRUE(all_close(gpu.dx, cpu.dx, 2 * atol, c.rtol)) << "dx";
  EXPECT_TRUE(all_close(gpu.dweight, cpu.dweight, sums_atol, 1e-5)) << "dweight";
  EXPECT_TRUE(all_close(gpu.dbias, cpu.dbias, sums_atol, 1e-5)) << "dbias";
  EXPECT_TRUE(all_close(gpu.running_mean, cpu.running_mean, 1e-6, 1e-5)) << "running_mean";
  EXPECT_TRUE(all_close(gpu.running_var, cpu.running_var, 1e-6, 1e-5)) << "running_var";
}

// Partial channel tiles (48), tiny tiles (C = 3, C = 1), several row blocks, and enough rows that
// the row-block count hits its cap (8x160x160x32) so threads stride over many rows.
const Shape kShapes[] = {{4, 37, 29, 48}, {3, 5, 7, 3}, {1, 1, 700, 1}, {2, 20, 20, 256},
                         {8, 160, 160, 32}};

class BatchNormCuda : public ::testing::TestWithParam<Case> {};

float* f32(const Tensor& t) { return t.data<float>(); }

}  // namespace

TEST_P(BatchNormCuda, TrainingMatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    expect_parity(make_inputs(shape, GetParam().dtype, seed += 10), GetParam(), true);
  }
}

TEST_P(BatchNormCuda, EvalMatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    expect_parity(make_inputs(shape, GetParam().dtype, seed += 10), GetParam(), false);
  }
}

// Same inputs, same bits: the reductions use no atomics and fixed orders.
TEST_P(BatchNormCuda, RepeatedRunsAreBitwiseIdentical) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Inputs in = make_inputs({4, 80, 80, 64}, GetParam().dtype, 300);
  const Result a = run(in, Device::cuda(0), true);
  const Result b = run(in, Device::cuda(0), true);
  EXPECT_EQ(a.y.to_double_vector(), b.y.to_double_vector());
  EXPECT_EQ(a.dx.to_double_vector(), b.dx.to_double_vector());
  EXPECT_EQ(a.dweight.to_double_vector(), b.dweight.to_double_vector());
  EXPECT_EQ(a.running_var.to_double_vector(), b.running_var.to_double_vector());
}

INSTANTIATE_TEST_SUITE_P(DTypes, BatchNormCuda,
                         ::testing::Values(Case{DType::F32, 1e-5}, Case{DType::BF16, 1.0 / 128},
                                           Case{DType::F16, 1.0 / 1024}));

// Mean 1e4, std 1 in float32: a float sum of squares would cancel completely.
TEST(BatchNormCudaStats, LargeMeanMatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Shape shape{8, 64, 64, 32};
  Tensor x = random_tensor(shape, 400, DType::F32, 1e4 - 1.7, 1e4 + 1.7);
  const kernels::BatchNormShape s{x.numel() / 32, 32};
  const int64_t size = kernels::moments_size(32);
  Tensor cpu = Tensor::empty({size});
  kernels::batch_norm_stats_cpu(DType::F32, x.data_ptr(), s, cpu.data_ptr());
  const Device gpu = Device::cuda(0);
  Tensor xg = x.to(gpu);
  Tensor moments = Tensor::empty({size}, DType::F32, gpu);
  Tensor workspace = Tensor::empty({kernels::batch_norm_workspace_floats(s)}, DType::F32, gpu);
  kernels::batch_norm_stats_cuda(DType::F32, xg.data_ptr(), s, f32(moments), f32(workspace),
                                 current_stream(gpu).handle());
  const std::vector<double> g = moments.to_double_vector(), c = cpu.to_double_vector();
  EXPECT_EQ(g[0], c[0]);
  for (int64_t ch = 0; ch < 32; ++ch) {
    EXPECT_NEAR(g[1 + ch], c[1 + ch], 1e-3) << ch;  // one float32 ulp at 1e4: both are rounded
    EXPECT_NEAR(g[33 + ch], c[33 + ch], 1e-4 * c[33 + ch]) << ch;
  }
}

// Local moments of two ranks (different row counts) merged on the GPU equal the moments of the
// concatenation, and the CPU merge of the same gathered buffer.
TEST(BatchNormCudaStats, MergeMatchesWholeAndCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const cudaStream_t stream = current_stream(gpu).handle();
  const int64_t C = 40, rows_a = 3000, rows_b = 1234, size = kernels::moments_size(C);
  Tensor whole = random_tensor({rows_a + rows_b, 1, 1, C}, 500, DType::F32, -3, 8).to(gpu);
  Tensor gathered = Tensor::empty({2, size}, DType::F32, gpu);
  Tensor workspace = Tensor::empty(
      {kernels::batch_norm_workspace_floats({rows_a + rows_b, C})}, DType::F32, gpu);
  kernels::batch_norm_stats_cuda(DType::F32, f32(whole), {rows_a, C}, f32(gathered),
                                 f32(workspace), stream);
  kernels::batch_norm_stats_cuda(DType::F32, f32(whole) + rows_a * C, {rows_b, C},
                                 f32(gathered) + size, f32(workspace), stream);
  Tensor merged = Tensor::empty({size}, DType::F32, gpu);
  kernels::batch_norm_merge_moments_cuda(2, C, f32(gathered), f32(merged), stream);
  Tensor direct = Tensor::empty({size}, DType::F32, gpu);
  kernels::batch_norm_stats_cuda(DType::F32, f32(whole), {rows_a + rows_b, C}, f32(direct),
                                 f32(workspace), stream);
  // Float statistics from different partitions of the rows: ~1e-6 relative apart.
  EXPECT_TRUE(all_close(merged, direct, 1e-5, 1e-5));
  Tensor gathered_cpu = gathered.to(Device::cpu());
  Tensor merged_cpu = Tensor::empty({size});
  kernels::batch_norm_merge_moments_cpu(DType::F32, 2, C, gathered_cpu.data_ptr(),
                                        merged_cpu.data_ptr());
  // Same inputs, both merged in double: equal up to the final float rounding.
  EXPECT_TRUE(all_close(merged, merged_cpu, 1e-7, 1e-6));
}

// The batch counter lives on the GPU and the running-statistics kernel advances it.
TEST(BatchNormCudaStats, TrainingCountsBatchesOnTheDevice) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor x = random_tensor({2, 3, 3, 8}, 51, DType::F32).to(DType::BF16).to(gpu);
  Tensor w = Tensor::ones({8}, DType::F32, gpu), b = Tensor::zeros({8}, DType::F32, gpu);
  Tensor rm = Tensor::zeros({8}, DType::F32, gpu), rv = Tensor::ones({8}, DType::F32, gpu);
  Tensor counter = Tensor::zeros({}, DType::I64, gpu);
  for (int i = 0; i < 3; ++i) ops::batch_norm(x, w, b, rm, rv, true, kMomentum, kEps, counter);
  ops::batch_norm(x, w, b, rm, rv, false, kMomentum, kEps, counter);
  EXPECT_EQ(counter.to_vector<int64_t>(), std::vector<int64_t>{3});
  EXPECT_THROW(ops::batch_norm(x, w, b, rm, rv, true, kMomentum, kEps,
                               Tensor::zeros({}, DType::I64)),  // on the CPU
               Error);
}

TEST(BatchNormCudaStats, EmptyBatchInEvalMode) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor x = Tensor::empty({0, 4, 4, 8}, DType::BF16, gpu);
  Tensor w = Tensor::ones({8}, DType::F32, gpu), b = Tensor::zeros({8}, DType::F32, gpu);
  Tensor y = ops::batch_norm(x, w, b, b, w, false, kMomentum, kEps);
  EXPECT_EQ(y.shape(), x.shape());
}
