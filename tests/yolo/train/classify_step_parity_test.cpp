// One training step of a classifier against the reference's own (YOLOv5 v7.0), made by
// tests/scripts/classify_reference.py `step`: tests/data/yolov5n_cls_coco128_64.pt (a yolov5n-cls
// the reference trained on coco128-cls, read by Kestrel's .pt reader) in training mode on the first
// 8 val images at 64 (the reference's centre crop, as it fed them),
// smartCrossEntropyLoss(label_smoothing=0.1), backward, clip_grad_norm_(10) and one step of
// smart_optimizer(model, 'Adam', 0.001, 0.9, 5e-5). Compared: the loss, every parameter's
// gradient, the gradient norm, the BatchNorm statistics the forward updated, and every parameter
// after the step.
// - RecordedReference: against tests/data/yolov5n_cls_step_64_summary.safetensors (PyTorch 2.15):
//   the full step file is 10 MB, so the repository keeps, per tensor, its sum, norm and largest
//   magnitude and 64 of its values spread from first to last (`summarize`), and every tensor is
//   compared by those;
// - LiveReference: where PyTorch, torchvision and the reference's source are present, the step is
//   made now and every element of every tensor is compared.
// Tolerances: gradients within 2e-5 of their tensor's largest magnitude (float32 sums taken in
// another order), statistics within 1e-6; after the Adam step (each parameter moves by about lr
// along its gradient's sign) at most 1 in 10000 parameters off by more than 1e-6, those whose
// gradient is within rounding of zero.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "engine/autograd.h"
#include "engine/ops/cross_entropy.h"
#include "engine/safetensors_tensors.h"
#include "tests/support/cli.h"
#include "tests/support/coco128.h"
#include "tests/support/step_reference.h"
#include "yolo/model/classifier_file.h"
#include "yolo/model/weights_file.h"
#include "yolo/train/optimizer.h"

namespace kestrel::yolo {
namespace {

namespace fs = std::filesystem;

const char* kWeights = "tests/data/yolov5n_cls_coco128_64.pt";
const char* kSummary = "tests/data/yolov5n_cls_step_64_summary.safetensors";

using testing::Difference;
using testing::file_layout;
using testing::ReferenceStep;
using testing::summary_positions;
using testing::values;

void expect_step_as_the_reference(const ReferenceStep& ref) {
  LoadedClassifier loaded = load_classifier_for_training(kWeights, 10, std::nullopt, /*pretrained=*/true, 0);
  ClassificationModel& model = *loaded.model;
  model.train(true);
  for (auto& [name, p] : model.named_parameters()) p.set_requires_grad(true);

  const Tensor images = ref.tensor("images").permute({0, 2, 3, 1}).contiguous();  // NCHW -> NHWC
  const Tensor loss = ops::cross_entropy(model.forward(images), ref.tensor("labels"), 0.1);
  const double ref_loss = ref.tensor("loss").item();
  EXPECT_NEAR(loss.item(), ref_loss, 2e-6 * std::abs(ref_loss)) << "loss";
  loss.backward();

  Optimizer optimizer = smart_optimizer(model, OptimizerKind::Adam, 0.001, 0.9, 5e-5);
  const std::vector<Tensor> params = optimizer.parameters();
  const double ref_norm = ref.tensor("grad_norm").item();
  EXPECT_NEAR(grad_norm(params).item(), ref_norm, 1e-5 * ref_norm) << "gradient norm";

  int grads = 0, buffers = 0;
  double worst_grad = 0, worst_buffer = 0;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (e.is_parameter) {
      ASSERT_TRUE(ref.has("grad." + e.name)) << e.name;
      const double d = ref.compare("grad." + e.name, file_layout(e, e.slot->grad())).scaled;
      EXPECT_LE(d, 2e-5) << "gradient of " << e.name;
      worst_grad = std::max(worst_grad, d);
      ++grads;
    } else if (ref.has("buffers." + e.name) && is_floating(e.slot->dtype())) {
      const double d = ref.compare("buffers." + e.name, *e.slot).scaled;
      EXPECT_LE(d, 1e-6) << "buffer " << e.name;
      worst_buffer = std::max(worst_buffer, d);
      ++buffers;
    }
  }
  EXPECT_EQ(grads, 98);
  EXPECT_EQ(buffers, 64);
  std::printf("worst gradient difference %.3g of the tensor's largest, worst BN statistic %.3g\n", worst_grad, worst_buffer);

  clip_grad_norm(params, 10.0);
  optimizer.step();
  int64_t elements = 0, off = 0;
  int compared = 0;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (!e.is_parameter || !ref.has("after." + e.name)) continue;
    const Difference d = ref.compare("after." + e.name, file_layout(e, *e.slot));
    off += d.off, elements += d.elements, ++compared;
  }
  EXPECT_EQ(compared, 98);
  std::printf("after the step: %lld of %lld parameters compared off by more than 1e-6\n", static_cast<long long>(off),
              static_cast<long long>(elements));
  EXPECT_LE(off, std::max<int64_t>(1, elements / 10000)) << "parameters after the Adam step";
}

TEST(ClassifyStepParity, RecordedReference) { expect_step_as_the_reference(ReferenceStep(kSummary, /*summary=*/true)); }

TEST(ClassifyStepParity, LiveReference) {
  testing::Reference ref;
  const std::string missing = testing::find_reference(ref, {"torch", "torchvision", "yaml", "cv2"}, "classify/train.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!fs::exists(testing::kCoco128Cls / "val")) GTEST_SKIP() << "coco128-cls not found at " << testing::kCoco128Cls;
  const fs::path out = fs::temp_directory_path() / ("kestrel_classify_step_" + std::to_string(::getpid()) + ".safetensors");
  const testing::CliResult r = testing::run_reference_python(
      ref, std::string("tests/scripts/classify_reference.py step ") + kWeights + " " + testing::kCoco128Cls.string() +
               " 64 8 " + out.string() + " --no-before");
  ASSERT_EQ(r.code, 0) << r.out;
  expect_step_as_the_reference(ReferenceStep(out.string(), /*summary=*/false));
  fs::remove(out);
}

}  // namespace
}  // namespace kestrel::yolo
