// CUDA multi-tensor kernels against the CPU reference. The per-element math rounds after every
// operation on both sides (kernels/optim.h: no FMA contraction, IEEE division and square root),
// so float32 updates must agree bit for bit; bfloat16 storage is compared with the float CPU
// result rounded once to bfloat16, which is what the kernel stores. The norm sums in double in a
// different order on each side: float32 results within 1e-6 relative. The per-step values (lr,
// momentum / beta1, Adam's and RMSProp's per-tensor counts, the EMA's count) are read from device
// memory on CUDA and host memory on the CPU, and the counts advance on both unless the step is
// skipped.
// The list mixes an empty tensor, tails shorter than a chunk, a tensor of more chunks than one
// launch holds (kMaxListBlocks) and more tensors than one launch holds (kMaxListTensors), so
// every path of the launch splitting runs.
#include <cmath>
#include <cstring>

#include "engine/stream.h"
#include "kernels/optim.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kernels::TensorList;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

std::vector<int64_t> sizes() {
  std::vector<int64_t> s = {1000, 0, 1, kernels::kListChunk + 1, 3 * kernels::kListChunk + 5,
                            (kernels::kMaxListBlocks + 10) * kernels::kListChunk + 7};
  for (int i = 0; i < 45; ++i) s.push_back(17 * i + 3);
  return s;
}

// `depth` columns of random float32 tensors on the CPU, one per size (values in [lo, hi)).
std::vector<std::vector<Tensor>> random_columns(int depth, uint64_t seed, double lo = -1,
                                                double hi = 1) {
  std::vector<std::vector<Tensor>> cols(depth);
  const std::vector<int64_t> n = sizes();
  for (int d = 0; d < depth; ++d)
    for (size_t k = 0; k < n.size(); ++k)
      cols[d].push_back(random_tensor({n[k]}, seed * 1000 + d * 100 + k, DType::F32, lo, hi));
  return cols;
}

std::vector<std::vector<Tensor>> to_device(const std::vector<std::vector<Tensor>>& cols, Device d,
                                           DType dtype = DType::F32) {
  std::vector<std::vector<Tensor>> out(cols.size());
  for (size_t c = 0; c < cols.size(); ++c)
    for (const Tensor& t : cols[c]) out[c].push_back(t.to(dtype).to(d));
  return out;
}

// counts (optional): int64 [tensors] on the columns' device, one step count per tensor.
TensorList list_of(const std::vector<std::vector<Tensor>>& cols, const Tensor& counts = Tensor()) {
  TensorList list(static_cast<int>(cols.size()));
  for (size_t k = 0; k < cols[0].size(); ++k) {
    std::array<void*, 4> p{};
    for (size_t c = 0; c < cols.size(); ++c) p[c] = cols[c][k].data_ptr();
    int64_t* count = counts.defined() ? counts.data<int64_t>() + k : nullptr;
    const int64_t n = cols[0][k].numel();
    switch (cols.size()) {
      case 1: list.add({p[0]}, n, count); break;
      case 2: list.add({p[0], p[1]}, n, count); break;
      case 3: list.add({p[0], p[1], p[2]}, n, count); break;
      default: list.add({p[0], p[1], p[2], p[3]}, n, count);
    }
  }
  return list;
}

// A GroupHyper in a float64 [2] tensor on `d` (the Optimizer keeps one row per group).
Tensor hyper_on(Device d, double lr, double momentum) {
  return Tensor::from_vector<double>({lr, momentum}, {2}, d);
}
const kernels::GroupHyper* hyper_ptr(const Tensor& t) {
  return reinterpret_cast<const kernels::GroupHyper*>(t.data<double>());
}

// Per-tensor step counts: `first` + k for tensor k, as int64 on `d`.
Tensor counts_on(Device d, size_t n, int64_t first) {
  std::vector<int64_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = first + static_cast<int64_t>(k);
  return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(n)}, d);
}

::testing::AssertionResult bitwise_equal(const Tensor& gpu, const Tensor& cpu) {
  Tensor a = gpu.to(Device::cpu()), b = cpu;
  if (a.dtype() != b.dtype() || a.numel() != b.numel())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  if (a.numel() == 0) return ::testing::AssertionSuccess();
  if (std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) != 0)
    return ::testing::AssertionFailure()
           << "not bitwise equal: " << all_close(a.to(DType::F64), b.to(DType::F64), 0, 0).message();
  return ::testing::AssertionSuccess();
}

cudaStream_t stream() { return current_stream(Device::cuda(0)).handle(); }

}  // namespace

TEST(OptimCuda, SgdMatchesCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(3, 1);
  auto gpu = to_device(cpu, Device::cuda(0));
  const kernels::SgdConfig cfg{5e-4, true};
  for (int step = 0; step < 3; ++step) {  // lr and momentum change between steps, as in warmup
    const Tensor hc = hyper_on(Device::cpu(), 0.01 / (step + 1), 0.8 + 0.05 * step);
    const Tensor hg = hc.to(Device::cuda(0));
    kernels::sgd_step_cpu(DType::F32, list_of(cpu), hyper_ptr(hc), cfg);
    kernels::sgd_step_cuda(DType::F32, list_of(gpu), hyper_ptr(hg), cfg, stream());
  }
  for (int c : {0, 2})
    for (size_t k = 0; k < cpu[c].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k])) << k;
}

TEST(OptimCuda, SgdBf16StorageRoundsOnce) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // CPU: float math on the bf16-rounded inputs, result rounded to bf16 once (as the kernel).
  auto base = random_columns(3, 2);
  auto gpu = to_device(base, Device::cuda(0), DType::BF16);
  auto cpu = to_device(to_device(base, Device::cpu(), DType::BF16), Device::cpu(), DType::F32);
  const kernels::SgdConfig cfg{1e-3, true};
  const Tensor hc = hyper_on(Device::cpu(), 0.1, 0.9), hg = hc.to(Device::cuda(0));
  kernels::sgd_step_cpu(DType::F32, list_of(cpu), hyper_ptr(hc), cfg);
  kernels::sgd_step_cuda(DType::BF16, list_of(gpu), hyper_ptr(hg), cfg, stream());
  for (size_t k = 0; k < cpu[0].size(); ++k)
    EXPECT_TRUE(bitwise_equal(gpu[0][k], cpu[0][k].to(DType::BF16))) << k;
}

class AdamCuda : public ::testing::TestWithParam<bool> {};

// Every tensor from its own count (0, 1, 2, ...): the bias corrections computed on the device per
// block equal the CPU's, and the counts advance by one per step on both sides.
TEST_P(AdamCuda, MatchesCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(4, 3);
  for (Tensor& v : cpu[3]) v = random_tensor(v.shape(), 77, DType::F32, 0, 1);  // v >= 0
  auto gpu = to_device(cpu, Device::cuda(0));
  const Tensor cc = counts_on(Device::cpu(), cpu[0].size(), 0);
  const Tensor cg = cc.to(Device::cuda(0));
  const kernels::AdamConfig cfg{0.999, 1e-8, 5e-4, GetParam()};
  for (int step = 1; step <= 3; ++step) {
    const Tensor hc = hyper_on(Device::cpu(), 1e-3 * step, 0.937), hg = hc.to(Device::cuda(0));
    kernels::adam_step_cpu(DType::F32, list_of(cpu, cc), hyper_ptr(hc), cfg);
    kernels::adam_step_cuda(DType::F32, list_of(gpu, cg), hyper_ptr(hg), cfg, stream());
  }
  for (int c : {0, 2, 3})
    for (size_t k = 0; k < cpu[c].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k])) << k;
  EXPECT_TRUE(bitwise_equal(cg, cc));
  EXPECT_EQ(cc.to_vector<int64_t>()[0], 3);
}

INSTANTIATE_TEST_SUITE_P(AdamAndAdamW, AdamCuda, ::testing::Values(false, true));

// RMSProp (momentum 0.9, then a step at momentum 0, as a group without momentum takes it): the
// same bits as the CPU in float32, the buffers included; the counts advance on both sides; a set
// skip flag changes nothing; bfloat16 storage rounds the float update once.
TEST(OptimCuda, RmspropMatchesCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(4, 12);
  for (Tensor& v : cpu[2]) v = random_tensor(v.shape(), 80, DType::F32, 0, 1);  // square_avg >= 0
  auto gpu = to_device(cpu, Device::cuda(0));
  const Tensor cc = counts_on(Device::cpu(), cpu[0].size(), 0), cg = cc.to(Device::cuda(0));
  const kernels::RmspropConfig cfg{0.99, 1e-8, 5e-4};
  const Tensor skip = Tensor::ones({1}, DType::F32, Device::cuda(0));
  for (int step = 1; step <= 3; ++step) {
    const Tensor hc = hyper_on(Device::cpu(), 1e-3 * step, step < 3 ? 0.9 : 0.0),
                 hg = hc.to(Device::cuda(0));
    kernels::rmsprop_step_cpu(DType::F32, list_of(cpu, cc), hyper_ptr(hc), cfg);
    kernels::rmsprop_step_cuda(DType::F32, list_of(gpu, cg), hyper_ptr(hg), cfg, stream());
    kernels::rmsprop_step_cuda(DType::F32, list_of(gpu, cg), hyper_ptr(hg), cfg, stream(),
                               skip.data<float>());
  }
  for (int c : {0, 2, 3})
    for (size_t k = 0; k < cpu[c].size(); ++k)
      EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k])) << k;
  EXPECT_TRUE(bitwise_equal(cg, cc));
  EXPECT_EQ(cc.to_vector<int64_t>()[0], 3);

  auto base = random_columns(4, 13);
  for (Tensor& v : base[2]) v = random_tensor(v.shape(), 81, DType::F32, 0, 1);
  auto half = to_device(base, Device::cuda(0), DType::BF16);
  auto rounded = to_device(to_device(base, Device::cpu(), DType::BF16), Device::cpu(), DType::F32);
  const Tensor hc = hyper_on(Device::cpu(), 1e-2, 0.9), hg = hc.to(Device::cuda(0));
  const Tensor c1 = counts_on(Device::cpu(), base[0].size(), 0), c2 = c1.to(Device::cuda(0));
  kernels::rmsprop_step_cpu(DType::F32, list_of(rounded, c1), hyper_ptr(hc), cfg);
  kernels::rmsprop_step_cuda(DType::BF16, list_of(half, c2), hyper_ptr(hg), cfg, stream());
  for (int c : {0, 2, 3})
    for (size_t k = 0; k < base[c].size(); ++k)
      EXPECT_TRUE(bitwise_equal(half[c][k], rounded[c][k].to(DType::BF16))) << c << " " << k;
}

TEST(OptimCuda, GlobalNormMatchesCpuAndRepeats) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(1, 4);
  auto gpu = to_device(cpu, Device::cuda(0));
  const TensorList list = list_of(gpu);
  Tensor work = Tensor::empty({kernels::norm_partial_count(list)}, DType::F64, Device::cuda(0));
  Tensor norm = Tensor::empty({}, DType::F32, Device::cuda(0));
  kernels::global_norm_cuda(DType::F32, list, work.data<double>(), norm.data<float>(), stream());
  const float first = static_cast<float>(norm.item());
  const double want = kernels::global_norm_cpu(DType::F32, list_of(cpu));
  EXPECT_NEAR(first, want, 1e-6 * want);
  for (int i = 0; i < 3; ++i) {  // deterministic: the same bits every run
    kernels::global_norm_cuda(DType::F32, list, work.data<double>(), norm.data<float>(), stream());
    EXPECT_EQ(static_cast<float>(norm.item()), first);
  }
}

TEST(OptimCuda, ClipScaleUsesTheDeviceNorm) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(1, 5, -3, 3);
  auto gpu = to_device(cpu, Device::cuda(0));
  const float norm_value = 123.25f;
  Tensor norm = Tensor::scalar(norm_value, DType::F32, Device::cuda(0));
  kernels::clip_scale_cuda(DType::F32, list_of(gpu), norm.data<float>(), 10.0, stream());
  kernels::scale_cpu(DType::F32, list_of(cpu), kernels::clip_coef(norm_value, 10.0f));
  for (size_t k = 0; k < cpu[0].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[0][k], cpu[0][k])) << k;
}

TEST(OptimCuda, ScaleFlagsInfAndNan) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(1, 6);
  auto gpu = to_device(cpu, Device::cuda(0));
  Tensor flag = Tensor::zeros({}, DType::F32, Device::cuda(0));
  kernels::scale_cuda(DType::F32, list_of(gpu), 1.0 / 65536, flag.data<float>(), stream());
  EXPECT_FALSE(kernels::scale_cpu(DType::F32, list_of(cpu), 1.0 / 65536));
  EXPECT_EQ(flag.item(), 0.0);
  for (size_t k = 0; k < cpu[0].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[0][k], cpu[0][k])) << k;
  for (float bad : {INFINITY, NAN}) {
    Tensor host = gpu[0][4].to(Device::cpu());
    host.data<float>()[12345] = bad;  // deep inside the multi-chunk tensor
    gpu[0][4].copy_(host);
    flag.zero_();
    kernels::scale_cuda(DType::F32, list_of(gpu), 1.0, flag.data<float>(), stream());
    EXPECT_EQ(flag.item(), 1.0);
  }
}

TEST(OptimCuda, EmaMatchesCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto cpu = random_columns(2, 7);
  auto gpu = to_device(cpu, Device::cuda(0));
  const kernels::EmaRamp ramp{0.9999, 2000.0};
  int64_t cpu_updates = 0;
  const Tensor gpu_updates = Tensor::zeros({1}, DType::I64, Device::cuda(0));
  for (int i = 0; i < 3; ++i) {
    kernels::ema_update_cpu(DType::F32, list_of(cpu), ramp, &cpu_updates);
    kernels::ema_update_cuda(DType::F32, list_of(gpu), ramp, gpu_updates.data<int64_t>(),
                             stream());
  }
  for (size_t k = 0; k < cpu[0].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[0][k], cpu[0][k])) << k;
  EXPECT_EQ(cpu_updates, 3);
  EXPECT_EQ(gpu_updates.to_vector<int64_t>()[0], 3);
}

TEST(OptimCuda, ZeroClearsEveryTensor) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto gpu = to_device(random_columns(1, 10), Device::cuda(0));
  kernels::zero_cuda(DType::F32, list_of(gpu), stream());
  for (size_t k = 0; k < gpu[0].size(); ++k)
    EXPECT_TRUE(bitwise_equal(gpu[0][k], Tensor::zeros(gpu[0][k].shape()))) << k;
  auto half = to_device(random_columns(1, 11), Device::cuda(0), DType::BF16);
  kernels::zero_cuda(DType::BF16, list_of(half), stream());
  for (size_t k = 0; k < half[0].size(); ++k)
    EXPECT_TRUE(bitwise_equal(half[0][k], Tensor::zeros(half[0][k].shape(), DType::BF16))) << k;
}

// The skip flag is read on the device: set, SGD, Adam and the EMA leave every buffer and count as
// it was; clear, the update equals the CPU's bit for bit and the counts advance.
TEST(OptimCuda, DeviceSkipFlagLeavesEverythingUnchanged) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu_dev = Device::cuda(0);
  const Tensor skip = Tensor::ones({1}, DType::F32, gpu_dev);
  const Tensor go = Tensor::zeros({1}, DType::F32, gpu_dev);
  auto cpu = random_columns(4, 8);
  for (Tensor& v : cpu[3]) v = random_tensor(v.shape(), 78, DType::F32, 0, 1);
  auto gpu = to_device(cpu, gpu_dev);
  const Tensor hc = hyper_on(Device::cpu(), 0.01, 0.937), hg = hc.to(gpu_dev);
  const kernels::SgdConfig sgd{5e-4, true};
  const kernels::AdamConfig adam{0.999, 1e-8, 5e-4, true};
  const kernels::EmaRamp ramp{0.9999, 2000.0};
  const Tensor cc = counts_on(Device::cpu(), cpu[0].size(), 4), cg = cc.to(gpu_dev);
  const Tensor ema_count = Tensor::full({1}, 7, DType::I64, gpu_dev);
  std::vector<std::vector<Tensor>> sgd_cols = {gpu[0], gpu[1], gpu[2]};
  kernels::sgd_step_cuda(DType::F32, list_of(sgd_cols), hyper_ptr(hg), sgd, stream(),
                         skip.data<float>());
  kernels::adam_step_cuda(DType::F32, list_of(gpu, cg), hyper_ptr(hg), adam, stream(),
                          skip.data<float>());
  std::vector<std::vector<Tensor>> ema_cols = {gpu[2], gpu[0]};
  kernels::ema_update_cuda(DType::F32, list_of(ema_cols), ramp, ema_count.data<int64_t>(),
                           stream(), skip.data<float>());
  for (int c : {0, 2, 3})
    for (size_t k = 0; k < cpu[c].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k])) << k;
  EXPECT_TRUE(bitwise_equal(cg, cc));
  EXPECT_EQ(ema_count.to_vector<int64_t>()[0], 7);

  std::vector<std::vector<Tensor>> cpu_sgd = {cpu[0], cpu[1], cpu[2]};
  kernels::sgd_step_cpu(DType::F32, list_of(cpu_sgd), hyper_ptr(hc), sgd);
  kernels::sgd_step_cuda(DType::F32, list_of(sgd_cols), hyper_ptr(hg), sgd, stream(),
                         go.data<float>());
  for (int c : {0, 2})
    for (size_t k = 0; k < cpu[c].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k])) << k;
  kernels::adam_step_cpu(DType::F32, list_of(cpu, cc), hyper_ptr(hc), adam);
  kernels::adam_step_cuda(DType::F32, list_of(gpu, cg), hyper_ptr(hg), adam, stream(),
                          go.data<float>());
  for (int c : {0, 2, 3})
    for (size_t k = 0; k < cpu[c].size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k])) << k;
  EXPECT_TRUE(bitwise_equal(cg, cc));
  EXPECT_EQ(cc.to_vector<int64_t>()[0], 5);
}

// Half storage (float16 and bfloat16 master copies, as a model kept in half would have): the
// kernels compute in float from the stored values and round each result once, so they equal the
// CPU's float update of the same rounded values, rounded once, bit for bit (Adam, EMA, clipping
// by a given norm); the norm of half gradients sums in double, within 1e-6 of the CPU's.
TEST(OptimCuda, AdamEmaAndClipWithHalfStorageRoundOnce) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu_dev = Device::cuda(0);
  for (DType half : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(half));
    auto base = random_columns(4, 9);
    for (Tensor& v : base[3]) v = random_tensor(v.shape(), 79, DType::F32, 0, 1);
    auto gpu = to_device(base, gpu_dev, half);
    auto cpu = to_device(to_device(base, Device::cpu(), half), Device::cpu(), DType::F32);
    const Tensor hc = hyper_on(Device::cpu(), 1e-3, 0.937), hg = hc.to(gpu_dev);
    const kernels::AdamConfig cfg{0.999, 1e-8, 5e-4, true};
    const Tensor cc = counts_on(Device::cpu(), cpu[0].size(), 2), cg = cc.to(gpu_dev);
    kernels::adam_step_cpu(DType::F32, list_of(cpu, cc), hyper_ptr(hc), cfg);
    kernels::adam_step_cuda(half, list_of(gpu, cg), hyper_ptr(hg), cfg, stream());
    EXPECT_TRUE(bitwise_equal(cg, cc));
    for (int c : {0, 2, 3})
      for (size_t k = 0; k < cpu[c].size(); ++k)
        EXPECT_TRUE(bitwise_equal(gpu[c][k], cpu[c][k].to(half))) << "column " << c << " tensor " << k;

    // EMA of the (rounded) updated parameters into the exp_avg column, as a half EMA would.
    std::vector<std::vector<Tensor>> ema_cpu = {cpu[2], cpu[0]}, ema_gpu = {gpu[2], gpu[0]};
    for (Tensor& t : ema_cpu[0]) t = t.to(half).to(DType::F32);
    for (Tensor& t : ema_cpu[1]) t = t.to(half).to(DType::F32);
    const kernels::EmaRamp ramp{0.75, 1e-300};  // exp(-n / tau) = 0: d = 0.75
    int64_t cpu_updates = 0;
    const Tensor gpu_updates = Tensor::zeros({1}, DType::I64, gpu_dev);
    kernels::ema_update_cpu(DType::F32, list_of(ema_cpu), ramp, &cpu_updates);
    kernels::ema_update_cuda(half, list_of(ema_gpu), ramp, gpu_updates.data<int64_t>(), stream());
    for (size_t k = 0; k < ema_cpu[0].size(); ++k)
      EXPECT_TRUE(bitwise_equal(ema_gpu[0][k], ema_cpu[0][k].to(half))) << "ema tensor " << k;

    // Clipping: the norm of half gradients, then the scale by a given device norm.
    std::vector<std::vector<Tensor>> g_gpu = {gpu[1]}, g_cpu = {cpu[1]};
    const TensorList glist = list_of(g_gpu);
    Tensor work = Tensor::empty({kernels::norm_partial_count(glist)}, DType::F64, gpu_dev);
    Tensor norm = Tensor::empty({}, DType::F32, gpu_dev);
    kernels::global_norm_cuda(half, glist, work.data<double>(), norm.data<float>(), stream());
    const double want = kernels::global_norm_cpu(DType::F32, list_of(g_cpu));
    EXPECT_NEAR(norm.item(), want, 1e-6 * want);
    const float given = 123.25f;
    Tensor given_dev = Tensor::scalar(given, DType::F32, gpu_dev);
    kernels::clip_scale_cuda(half, glist, given_dev.data<float>(), 10.0, stream());
    kernels::scale_cpu(DType::F32, list_of(g_cpu), kernels::clip_coef(given, 10.0f));
    for (size_t k = 0; k < g_cpu[0].size(); ++k)
      EXPECT_TRUE(bitwise_equal(g_gpu[0][k], g_cpu[0][k].to(half))) << "gradient " << k;
  }
}
