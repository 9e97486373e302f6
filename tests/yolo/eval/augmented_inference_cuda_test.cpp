// Test-time augmentation's CUDA kernels against the CPU: the mirrored bilinear resize with its
// padding, and the descale, in float32 (a few float roundings: 1e-6) and float16 (--half: the
// result rounded once to half, 1e-3 relative). Then val and detect's --half on CUDA: the model
// in float16, plain and augmented, against float32, and a whole validation with both flags.
#include "engine/autograd.h"
#include "tests/support/testing.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/synthetic.h"
#include "yolo/eval/augmented_inference.h"
#include "yolo/eval/validator.h"

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

// --half: float16 activations (the weights cast per layer) give float32's boxes to float16's
// precision: 3e-2 relative (float16 keeps 11 bits, and ~60 layers each round once), 2e-2 absolute
// for the scores near 0. A wrong kernel is off by O(1).
TEST(AugmentedInferenceCuda, HalfPrecisionFollowsFloat32) {
  KESTREL_SKIP_WITHOUT_CUDA();
  DetectionModel model(load_model_config("models/yolov5n.yaml"), 3, 0);
  model.train(false);
  model.to(Device::cuda(0));
  autograd::NoGradGuard no_grad;
  const Tensor x = random_tensor({2, 128, 160, 3}, 10, DType::F32, 0, 1).to(Device::cuda(0));
  const Tensor full = model.predict(x).boxes, half = model.predict(x.to(DType::F16)).boxes;
  EXPECT_EQ(half.dtype(), DType::F16);
  EXPECT_TRUE(all_close(half.to(DType::F32), full, 2e-2, 3e-2));
  const Tensor tta_full = predict_augmented(model, x), tta_half = predict_augmented(model, x.to(DType::F16));
  EXPECT_EQ(tta_half.dtype(), DType::F16);
  EXPECT_TRUE(all_close(tta_half.to(DType::F32), tta_full, 2e-2, 3e-2));
}

TEST(AugmentedInferenceCuda, ValidatesInHalfPrecisionWithAugment) {
  KESTREL_SKIP_WITHOUT_CUDA();
  DetectionModel model(load_model_config("models/yolov5n.yaml"), 4, 0);
  model.to(Device::cuda(0));
  const data::DatasetConfig cfg = data::load_dataset_config(data::ensure_synthetic_dataset(data::default_synthetic_dir()));
  data::DatasetSplit split = data::load_split(cfg, "val", cfg.nc, false, true, 0, true);
  split.records.resize(16);
  ValOptions vo;
  vo.img_size = 128;
  vo.batch_size = 8;
  vo.workers = 1;
  vo.compute_dtype = DType::F16;
  vo.augment = true;
  Validator validator(split.records, cfg.names, cfg.nc, vo, Device::cuda(0), 32);
  const ValResult r = validator.run(model);
  EXPECT_EQ(r.images, 16);
  EXPECT_GT(r.instances, 0);
}
