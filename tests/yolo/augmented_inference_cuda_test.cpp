// Test-time augmentation's CUDA kernels against the CPU: the mirrored bilinear resize with its
// padding, and the descale, in float32 (a few float roundings: 1e-6) and float16 (--half: the
// result rounded once to half, 1e-3 relative).
#include "engine/autograd.h"
#include "tests/support/testing.h"
#include "yolo/augmented_inference.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

TEST(AugmentedInferenceCuda, ScaleAndDescaleMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Tensor x = random_tensor({2, 96, 160, 3}, 7, DType::F32, 0, 1);
  for (const TtaPass& pass : tta_passes()) {
    const Tensor cpu = tta_scale_image(x, pass.scale, 32, pass.flip_lr);
    const Tensor gpu = tta_scale_image(x.to(Device::cuda(0)), pass.scale, 32, pass.flip_lr);
    EXPECT_TRUE(all_close(gpu, cpu, 1e-6, 1e-6)) << pass.scale;
    const Tensor half = tta_scale_image(x.to(Device::cuda(0)).to(DType::F16), pass.scale, 32, pass.flip_lr);
    EXPECT_TRUE(all_close(half.to(DType::F32), cpu, 1e-3, 1e-3)) << pass.scale << " float16";
  }
  const Tensor p = random_tensor({2, 50, 9}, 8, DType::F32, 0, 300);
  const Tensor cpu = tta_descale(p, 0.83, true, 160);
  EXPECT_TRUE(all_close(tta_descale(p.to(Device::cuda(0)), 0.83, true, 160), cpu, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(tta_descale(p.to(Device::cuda(0)).to(DType::F16), 0.83, true, 160).to(DType::F32), cpu,
                        0.25, 2e-3));
}

TEST(AugmentedInferenceCuda, AugmentedPredictionMatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  DetectionModel cpu(load_model_config("models/yolov5n.yaml"), 3, 0);
  DetectionModel gpu(load_model_config("models/yolov5n.yaml"), 3, 0);
  cpu.train(false);
  gpu.train(false);
  gpu.to(Device::cuda(0));
  autograd::NoGradGuard no_grad;
  const Tensor x = random_tensor({1, 128, 192, 3}, 9, DType::F32, 0, 1);
  EXPECT_TRUE(all_close(predict_augmented(gpu, x.to(Device::cuda(0))), predict_augmented(cpu, x), 1e-3, 1e-3));
}
