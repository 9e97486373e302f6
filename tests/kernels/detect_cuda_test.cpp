// The Detect decode on CUDA against the CPU: float32 within 1e-5 relative (expf differs by an
// ulp or so between the host's libm and CUDA); float16 and bfloat16 storage compute in float from
// the rounded inputs and round the result once, so they match the CPU's float result on the same
// rounded inputs within one rounding of the output (2^-10 and 2^-7 relative, plus a small
// absolute term for values near zero).
#include "engine/stream.h"
#include "kernels/detect.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;

TEST(DetectDecodeCuda, MatchesTheCpuInEveryStorageType) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const kernels::DetectLevelShape s{2, 3, 20, 24, 85, 32.0};
  const std::vector<float> anchors = {116, 90, 156, 198, 373, 326};
  const Tensor anchors_dev = Tensor::from_vector(anchors, {6}).to(gpu);
  for (auto [dtype, rtol] : {std::tuple{DType::F32, 1e-5}, std::tuple{DType::F16, 1.0 / 1024},
                             std::tuple{DType::BF16, 1.0 / 128}}) {
    SCOPED_TRACE(dtype_name(dtype));
    // The half inputs rounded first, so both sides start from the same values.
    const Tensor raw = kestrel::testing::random_tensor({s.numel()}, 11, DType::F32, -8, 8)
                           .to(dtype);
    const Tensor raw_f32 = raw.to(DType::F32);
    const Tensor want = Tensor::empty_like(raw_f32);
    kernels::detect_decode_cpu(DType::F32, raw_f32.data_ptr(), want.data_ptr(), s, anchors.data());
    const Tensor raw_dev = raw.to(gpu);
    const Tensor got = Tensor::empty_like(raw_dev);
    kernels::detect_decode_cuda(dtype, raw_dev.data_ptr(), got.data_ptr(), s,
                                anchors_dev.data<float>(), current_stream(gpu).handle());
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_TRUE(all_close(got.to(Device::cpu()).to(DType::F32), want, 1e-4, rtol));
  }
}
