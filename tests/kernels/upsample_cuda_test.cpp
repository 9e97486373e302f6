// CUDA nearest 2x upsampling against the CPU reference.
// Forward only moves data: exact in every dtype. Backward: both devices add the same four float
// values of each 2x2 block in the same order (kernels/upsample.h) and round the float sum once,
// so the CUDA result equals the CPU's float32 result rounded to the CUDA dtype, exactly (inputs
// are compared after the same rounding to bf16/fp16). Shapes cover the 16-byte vector path
// (channels a multiple of 8), the scalar path (odd channel counts), and 64-bit indexing.
#include "engine/ops/upsample.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

namespace {

class UpsampleCuda : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(UpsampleCuda, ForwardMatchesCpuExactly) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::U8}) {
    Tensor x = random_tensor(GetParam(), 1, DType::F64, 0, 250).to(dtype);
    Tensor y = ops::upsample_nearest2x(x.to(Device::cuda(0)));
    ASSERT_TRUE(y.device().is_cuda());
    EXPECT_EQ(y.to_double_vector(), ops::upsample_nearest2x(x).to_double_vector())
        << dtype_name(dtype);
  }
}

TEST_P(UpsampleCuda, BackwardMatchesCpuAfterOneRounding) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Shape& s = GetParam();
  const Shape out{s[0], 2 * s[1], 2 * s[2], s[3]};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Tensor x_gpu = Tensor::zeros(s, dtype, Device::cuda(0)).set_requires_grad();
    Tensor x_cpu = Tensor::zeros(s, DType::F32).set_requires_grad();
    Tensor dy = random_tensor(out, 2, DType::F32, -3, 3).to(dtype);
    ops::upsample_nearest2x(x_gpu).backward(dy.to(Device::cuda(0)));
    ops::upsample_nearest2x(x_cpu).backward(dy.to(DType::F32));
    EXPECT_EQ(x_gpu.grad().to_double_vector(), x_cpu.grad().to(dtype).to_double_vector())
        << dtype_name(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, UpsampleCuda,
                         ::testing::Values(Shape{2, 20, 20, 256}, Shape{1, 7, 5, 3},
                                           Shape{3, 4, 6, 8}, Shape{2, 1, 1, 1}, Shape{2, 9, 3, 12},
                                           Shape{1, 40, 40, 129}));

TEST(UpsampleCudaLarge, BeyondInt32Offsets) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // One-channel bf16 at 2^29 + 2^15 pixels: the output has over 2^31 elements, so both
  // directions take the 64-bit indexing path. Backward of an upsampled tensor is 4x that tensor
  // (exact in bf16), which only holds if every block is gathered from the right place.
  const int64_t h = (int64_t(1) << 14) + 1, w = int64_t(1) << 15;
  bf16 levels[256];
  for (int v = 0; v < 256; ++v) levels[v] = __float2bfloat16(float(v));
  std::vector<bf16> z(h * w);
  for (size_t i = 0; i < z.size(); ++i) z[i] = levels[static_cast<uint32_t>(i * 2654435761u) >> 24];
  Tensor x = Tensor::from_vector(z, {1, h, w, 1}, Device::cuda(0));
  Tensor dy = ops::upsample_nearest2x(x);
  {
    // Spot checks of the forward, including the last rows (offsets beyond 2^31).
    std::vector<bf16> y = dy.to_vector<bf16>();
    for (int64_t oh : {int64_t(0), h, 2 * h - 2, 2 * h - 1})
      for (int64_t ow = 0; ow < 2 * w; ow += 4093)
        ASSERT_EQ(__bfloat162float(y[oh * 2 * w + ow]), __bfloat162float(z[(oh / 2) * w + ow / 2]))
            << oh << ", " << ow;
  }
  Tensor leaf = Tensor::zeros({1, h, w, 1}, DType::BF16, Device::cuda(0)).set_requires_grad();
  ops::upsample_nearest2x(leaf).backward(dy);
  std::vector<bf16> dx = leaf.grad().to_vector<bf16>();
  size_t first_wrong = 0;
  while (first_wrong < z.size() &&
         __bfloat162float(dx[first_wrong]) == 4.0f * __bfloat162float(z[first_wrong]))
    ++first_wrong;
  EXPECT_EQ(first_wrong, z.size()) << "first wrong gradient element";
}
