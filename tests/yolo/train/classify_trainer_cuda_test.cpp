// The classifier on a GPU (skipped without a CUDA device):
// - CPU against CUDA, float32: one training step of a seeded yolov5n-cls (models/yolov5n.yaml cut
//   at 10; the GPU suite runs from the bundle, which carries models/ but not tests/data/) on the
//   same random batch gives the same loss and gradients (within float32 reordering: 1e-4 of each
//   tensor's largest);
// - the trainer in the default precision (bf16 on sm_80+, fp16 with loss scaling before), stopped
//   in its second epoch and resumed, ends bitwise where an uninterrupted run ends, with finite
//   results.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "engine/ops/cross_entropy.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "tests/yolo/cli/classify_folder.h"
#include "tests/yolo/train/training_state.h"
#include "yolo/common/stop_signal.h"
#include "yolo/model/classifier_file.h"
#include "yolo/train/classify_trainer.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

std::vector<double> host(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64).contiguous().to_double_vector(); }

}  // namespace

TEST(ClassifyCuda, StepMatchesTheCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Tensor images = kestrel::testing::random_tensor({4, 64, 64, 3}, 3, DType::F32, -2.0, 2.0);
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 3, 7, 9}, {4});
  std::vector<std::vector<double>> grads[2];
  double losses[2];
  for (int d = 0; d < 2; ++d) {
    const Device device = d == 0 ? Device::cpu() : Device::cuda(0);
    yolo::LoadedClassifier c =
        yolo::load_classifier_for_training("models/yolov5n.yaml", 10, std::nullopt, true, 0);
    c.model->to(device);
    c.model->train(true);
    for (auto& [n, p] : c.model->named_parameters()) p.set_requires_grad(true);
    const Tensor loss = ops::cross_entropy(c.model->forward(images.to(device)), labels.to(device), 0.1);
    loss.backward();
    losses[d] = loss.item();
    for (auto& [n, p] : c.model->named_parameters()) grads[d].push_back(host(p.grad()));
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::abs(losses[0]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    double diff = 0, scale = 0;
    for (size_t k = 0; k < grads[0][i].size(); ++k) {
      diff = std::max(diff, std::abs(grads[0][i][k] - grads[1][i][k]));
      scale = std::max(scale, std::abs(grads[0][i][k]));
    }
    EXPECT_LE(diff, 1e-4 * scale + 1e-12) << "parameter " << i;
  }
}

TEST(ClassifyCuda, DefaultPrecisionRunStoppedAndResumedEqualsAnUninterruptedRun) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const fs::path dir = fs::temp_directory_path() / ("kestrel_classify_cuda_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  kestrel::testing::make_classify_folder(dir / "data", {"a", "b", "c"}, 8, 2);
  auto options = [&](const std::string& project) {
    yolo::ClassifyTrainOptions o;
    o.model = "yolov5n.yaml";
    o.data = (dir / "data").string();
    o.imgsz = 64, o.batch_size = 8, o.epochs = 3, o.workers = 1;
    o.device = "0";
    o.noplots = true;
    o.project = (dir / project).string();
    return o;
  };
  yolo::ClassifyTrainResults whole, resumed;
  ASSERT_EQ(yolo::train_classifier(options("a"), &whole), 0);
  EXPECT_TRUE(std::isfinite(whole.train_loss) && std::isfinite(whole.val_loss));
  yolo::ClassifyTrainOptions first = options("b");
  first.interrupt_after = 4;
  EXPECT_THROW(yolo::train_classifier(first), yolo::Interrupted);
  yolo::ClassifyTrainOptions again = options("b");
  again.resume = "";
  ASSERT_EQ(yolo::train_classifier(again, &resumed), 0);
  EXPECT_EQ(whole.train_loss, resumed.train_loss);
  kestrel::testing::expect_same_tensors(dir / "a/exp/weights/last.safetensors", dir / "b/exp/weights/last.safetensors");
  fs::remove_all(dir);
}
