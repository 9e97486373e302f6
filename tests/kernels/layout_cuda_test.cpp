// CUDA layout conversions and images_to_input against the CPU reference.
// The transposes only move data, so every dtype must agree bit for bit (tolerance 0). Shapes cover
// full 32x32 tiles, partial edge tiles, the narrow-dimension tiles (C = 3 images, C = 1) in both
// directions, and a 640x640 image batch. images_to_input computes scaled_pixel
// (kernels/layout.h) on both devices with correctly rounded operations (a double product, then
// float32, then the output dtype), so it is exact too.
#include <utility>

#include "engine/ops/layout.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

namespace {

class LayoutCuda : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(LayoutCuda, BothDirectionsMatchCpuExactly) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::U8, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_tensor(GetParam(), 1, DType::F64, 0, 250).to(dtype);
    Tensor x_gpu = x.to(Device::cuda(0));
    Tensor nhwc = ops::nchw_to_nhwc(x_gpu), nchw = ops::nhwc_to_nchw(x_gpu);
    ASSERT_TRUE(nhwc.device().is_cuda());
    EXPECT_EQ(nhwc.to_double_vector(), ops::nchw_to_nhwc(x).to_double_vector());
    EXPECT_EQ(nchw.to_double_vector(), ops::nhwc_to_nchw(x).to_double_vector());
  }
}

TEST_P(LayoutCuda, GradientsMatchCpuExactly) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor x = random_tensor(GetParam(), 2, DType::F32).to(dtype);
    Tensor x_gpu = x.to(Device::cuda(0)).set_requires_grad();
    Tensor x_cpu = x.detach().set_requires_grad();
    Tensor dy = random_tensor(ops::nchw_to_nhwc(x).shape(), 3, DType::F32).to(dtype);
    ops::nchw_to_nhwc(x_gpu).backward(dy.to(Device::cuda(0)));
    ops::nchw_to_nhwc(x_cpu).backward(dy);
    EXPECT_EQ(x_gpu.grad().to_double_vector(), x_cpu.grad().to_double_vector());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayoutCuda,
                         ::testing::Values(Shape{2, 3, 64, 48}, Shape{2, 64, 20, 20},
                                           Shape{1, 37, 5, 9}, Shape{3, 5, 7, 1}, Shape{1, 1, 1, 1},
                                           Shape{2, 256, 9, 7}, Shape{1, 31, 33, 1},
                                           Shape{2, 1, 50, 41}, Shape{1, 700, 2, 3},
                                           Shape{2, 3, 640, 640}));

TEST(ImagesToInputCuda, MatchesCpuForEveryByte) {
  KESTREL_SKIP_WITHOUT_CUDA();
  std::vector<uint8_t> bytes(2 * 8 * 16 * 3);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37);
  Tensor images = Tensor::from_vector(bytes, {2, 8, 16, 3});
  Tensor images_gpu = images.to(Device::cuda(0));
  // 15 bytes (not a multiple of 4) and a view starting 3 bytes in take the scalar path.
  Tensor odd = images.reshape({-1}).slice(0, 0, 15).reshape({1, 1, 5, 3});
  const std::pair<Tensor, Tensor> cases[] = {{images, images_gpu},
                                             {odd, odd.to(Device::cuda(0))},
                                             {images.reshape({-1, 1, 1, 3}).slice(0, 1, 200),
                                              images_gpu.reshape({-1, 1, 1, 3}).slice(0, 1, 200)}};
  for (const auto& [cpu, gpu] : cases) {
    ASSERT_TRUE(gpu.device().is_cuda());
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      for (double scale : {1.0 / 255.0, 1.0, 0.1}) {
        Tensor expected = ops::images_to_input(cpu, DType::F32, scale).to(dtype);
        Tensor got = ops::images_to_input(gpu, dtype, scale);
        ASSERT_EQ(got.dtype(), dtype);
        EXPECT_EQ(got.to_double_vector(), expected.to_double_vector())
            << dtype_name(dtype) << " scale " << scale;
      }
    }
  }
}
