// The loss scaler's CUDA kernels against the CPU reference (skipped without a device): unscaling
// reads the scale on the device and agrees bit for bit in float32 (one rounding per product on
// both sides); float16 and bfloat16 storage equal the float CPU result rounded once; the found-inf
// flag is set by an inf or NaN anywhere in a list cut into several launches (more tensors and
// blocks than one launch holds) and is never cleared by unscaling; the combined skip flag and the
// scale schedule follow the CPU over a sequence of steps.
#include <cmath>
#include <cstring>
#include <random>

#include "engine/stream.h"
#include "kernels/amp_scale.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kernels::TensorList;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

const Device kGpu = Device::cuda(0);

cudaStream_t stream() { return current_stream(kGpu).handle(); }

std::vector<int64_t> sizes() {
  std::vector<int64_t> s = {1000, 0, 1, kernels::kListChunk + 1, 3 * kernels::kListChunk + 5,
                            (kernels::kMaxListBlocks + 10) * kernels::kListChunk + 7};
  for (int i = 0; i < 45; ++i) s.push_back(17 * i + 3);
  return s;
}

std::vector<Tensor> random_list(uint64_t seed) {
  std::vector<Tensor> out;
  for (int64_t n : sizes())
    out.push_back(random_tensor({n}, seed * 1000 + n, DType::F32, -5e4, 5e4));
  return out;
}

std::vector<Tensor> converted(const std::vector<Tensor>& ts, DType dtype, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(dtype).to(device));
  return out;
}

TensorList list_of(const std::vector<Tensor>& ts) {
  TensorList list(1);
  for (const Tensor& t : ts) list.add({t.data_ptr()}, t.numel());
  return list;
}

::testing::AssertionResult bitwise_equal(const Tensor& gpu, const Tensor& cpu) {
  Tensor a = gpu.to(Device::cpu()), b = cpu;
  if (a.dtype() != b.dtype() || a.numel() != b.numel())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  if (a.numel() == 0) return ::testing::AssertionSuccess();
  if (std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) != 0)
    return ::testing::AssertionFailure()
           << "not bitwise equal: "
           << all_close(a.to(DType::F64), b.to(DType::F64), 0, 0).message();
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(AmpScaleCuda, UnscaleMatchesCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (float scale_value : {65536.0f, 3.0f}) {
    SCOPED_TRACE(scale_value);
    std::vector<Tensor> cpu = random_list(1), gpu = converted(cpu, DType::F32, kGpu);
    const Tensor scale = Tensor::scalar(scale_value, DType::F32, kGpu);
    Tensor found = Tensor::zeros({1}, DType::F32, kGpu);
    kernels::unscale_cuda(DType::F32, list_of(gpu), scale.data<float>(), found.data<float>(),
                          stream());
    float cpu_found = 0.0f;
    kernels::unscale_cpu(DType::F32, list_of(cpu), &scale_value, &cpu_found);
    EXPECT_EQ(found.item(), 0.0);
    EXPECT_EQ(cpu_found, 0.0f);
    for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(bitwise_equal(gpu[k], cpu[k])) << k;
  }
}

TEST(AmpScaleCuda, HalfStorageRoundsOnce) {
  KESTREL_SKIP_WITHOUT_CUDA();
  float scale_value = 1024.0f;
  const Tensor scale = Tensor::scalar(scale_value, DType::F32, kGpu);
  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Values within float16's range, rounded to the storage type; the CPU unscales them in float.
    std::vector<Tensor> cpu;
    for (const Tensor& t : random_list(2)) cpu.push_back(t.to(dtype).to(DType::F32));
    std::vector<Tensor> gpu = converted(cpu, dtype, kGpu);
    Tensor found = Tensor::zeros({1}, DType::F32, kGpu);
    kernels::unscale_cuda(dtype, list_of(gpu), scale.data<float>(), found.data<float>(), stream());
    float cpu_found = 0.0f;
    kernels::unscale_cpu(DType::F32, list_of(cpu), &scale_value, &cpu_found);
    EXPECT_EQ(found.item(), 0.0);
    for (size_t k = 0; k < cpu.size(); ++k)
      EXPECT_TRUE(bitwise_equal(gpu[k], cpu[k].to(dtype))) << k;
  }
}

TEST(AmpScaleCuda, UnscaleFlagsInfAndNanAnywhere) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Tensor scale = Tensor::scalar(65536.0, DType::F32, kGpu);
  const std::vector<size_t> where = {4, 5, 50};  // multi-chunk, multi-launch, a later launch
  for (size_t k : where) {
    for (float bad : {INFINITY, NAN}) {
      std::vector<Tensor> gpu = converted(random_list(3), DType::F32, kGpu);
      Tensor host = gpu[k].to(Device::cpu());
      host.data<float>()[host.numel() - 1] = bad;
      gpu[k].copy_(host);
      Tensor found = Tensor::zeros({1}, DType::F32, kGpu);
      kernels::unscale_cuda(DType::F32, list_of(gpu), scale.data<float>(), found.data<float>(),
                            stream());
      EXPECT_EQ(found.item(), 1.0) << k << " " << bad;
    }
  }
  std::vector<Tensor> good = converted(random_list(4), DType::F32, kGpu);
  Tensor found = Tensor::ones({1}, DType::F32, kGpu);
  kernels::unscale_cuda(DType::F32, list_of(good), scale.data<float>(), found.data<float>(),
                        stream());
  EXPECT_EQ(found.item(), 1.0);
}

TEST(AmpScaleCuda, SkipAndScheduleFollowTheCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const kernels::ScaleSchedule s{2.0, 0.5, 3};
  Tensor scale = Tensor::scalar(65536.0, DType::F32, kGpu);
  Tensor tracker = Tensor::zeros({}, DType::I32, kGpu);
  Tensor skipped = Tensor::zeros({}, DType::I64, kGpu);
  Tensor found = Tensor::zeros({1}, DType::F32, kGpu);
  Tensor caller = Tensor::zeros({1}, DType::F32, kGpu);
  Tensor combined = Tensor::zeros({1}, DType::F32, kGpu);
  float c_scale = 65536.0f, c_found = 0.0f, c_caller = 0.0f, c_combined = 0.0f;
  int32_t c_tracker = 0;
  int64_t c_skipped = 0;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 60; ++i) {
    c_found = rng() % 3 == 0 ? 1.0f : 0.0f;
    c_caller = rng() % 4 == 0 ? 1.0f : 0.0f;
    found.fill_(c_found);
    caller.fill_(c_caller);
    const bool with_caller = i % 2 == 0;
    kernels::combine_skip_cuda(with_caller ? caller.data<float>() : nullptr, found.data<float>(),
                               combined.data<float>(), stream());
    kernels::combine_skip_cpu(with_caller ? &c_caller : nullptr, &c_found, &c_combined);
    kernels::update_scale_cuda(scale.data<float>(), tracker.data<int32_t>(),
                               skipped.data<int64_t>(), found.data<float>(), s, stream());
    kernels::update_scale_cpu(&c_scale, &c_tracker, &c_skipped, &c_found, s);
    ASSERT_EQ(combined.item(), c_combined) << i;
    ASSERT_EQ(scale.item(), c_scale) << i;
    ASSERT_EQ(tracker.item(), c_tracker) << i;
    ASSERT_EQ(skipped.item(), static_cast<double>(c_skipped)) << i;
    ASSERT_EQ(found.item(), 0.0) << i;
  }
  EXPECT_GT(c_skipped, 5);
}
