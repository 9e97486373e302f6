// One training step of a classifier against the reference's own (YOLOv5 v7.0 on PyTorch 2.15, the
// fixture tests/data/yolov5n_cls_step_64.safetensors made by tests/scripts/classify_reference.py
// `step`): tests/data/yolov5n_cls_coco128_64.pt (a yolov5n-cls the reference trained on coco128-cls,
// read by Kestrel's .pt reader) in training mode on the first 8 val images at 64 (the reference's
// centre crop, as it fed them), smartCrossEntropyLoss(label_smoothing=0.1), backward,
// clip_grad_norm_(10) and one step of smart_optimizer(model, 'Adam', 0.001, 0.9, 5e-5).
// Compared: the loss, every parameter's gradient, the gradient norm, the BatchNorm statistics the
// forward updated, and the parameters after the step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/autograd.h"
#include "engine/ops/cross_entropy.h"
#include "engine/safetensors_tensors.h"
#include "yolo/model/classifier_file.h"
#include "yolo/model/weights_file.h"
#include "yolo/train/optimizer.h"

namespace kestrel::yolo {
namespace {

const char* kWeights = "tests/data/yolov5n_cls_coco128_64.pt";
const char* kFixture = "tests/data/yolov5n_cls_step_64.safetensors";

std::vector<double> values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).to(DType::F64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

// max |a - b| over max |b| (relative to the tensor's scale: gradients of float32 sums taken in
// another order differ by rounding relative to their largest terms, not elementwise).
double scaled_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// The state entry's tensor (or its gradient) in the file's layout (OIHW convolutions).
Tensor file_layout(const layers::StateEntry& e, const Tensor& t) {
  return e.ohwi_conv_weight ? t.permute({0, 3, 1, 2}) : t;
}

TEST(ClassifyStepParity, LossGradientsStatisticsAndAdamStepAsTheReference) {
  ASSERT_TRUE(std::filesystem::exists(kFixture)) << kFixture;
  const SafetensorsFile fixture = read_weights_file(kFixture);
  LoadedClassifier loaded = load_classifier_for_training(kWeights, 10, std::nullopt, /*pretrained=*/true, 0);
  ClassificationModel& model = *loaded.model;
  model.train(true);
  for (auto& [name, p] : model.named_parameters()) p.set_requires_grad(true);

  const Tensor images = safetensors_tensor(fixture, "images").permute({0, 2, 3, 1}).contiguous();  // NCHW -> NHWC
  const Tensor labels = safetensors_tensor(fixture, "labels");
  const Tensor loss = ops::cross_entropy(model.forward(images), labels, 0.1);
  const double ref_loss = safetensors_tensor(fixture, "loss").item();
  EXPECT_NEAR(loss.item(), ref_loss, 2e-6 * std::abs(ref_loss)) << "loss";
  loss.backward();

  Optimizer optimizer = smart_optimizer(model, OptimizerKind::Adam, 0.001, 0.9, 5e-5);
  const std::vector<Tensor> params = optimizer.parameters();
  EXPECT_NEAR(grad_norm(params).item(), safetensors_tensor(fixture, "grad_norm").item(), 1e-5 * 21.6) << "grad norm";

  int grads = 0, buffers = 0;
  double worst_grad = 0, worst_buffer = 0;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (e.is_parameter) {
      ASSERT_TRUE(fixture.contains("grad." + e.name)) << e.name;
      const double d = scaled_difference(file_layout(e, e.slot->grad()), safetensors_tensor(fixture, "grad." + e.name));
      EXPECT_LE(d, 2e-5) << "gradient of " << e.name;
      worst_grad = std::max(worst_grad, d);
      ++grads;
    } else if (fixture.contains("buffers." + e.name) && is_floating(e.slot->dtype())) {
      const double d = scaled_difference(*e.slot, safetensors_tensor(fixture, "buffers." + e.name));
      EXPECT_LE(d, 1e-6) << "buffer " << e.name;
      worst_buffer = std::max(worst_buffer, d);
      ++buffers;
    }
  }
  EXPECT_EQ(grads, 98);
  EXPECT_EQ(buffers, 64);
  std::printf("worst gradient difference %.3g of the tensor's largest, worst BN statistic %.3g\n", worst_grad, worst_buffer);

  // Clipping and one Adam step: each parameter moves by about lr in the direction of its
  // gradient's sign, so a gradient within rounding of zero may move the other way; count those.
  clip_grad_norm(params, 10.0);
  optimizer.step();
  int64_t elements = 0, off = 0;
  int compared = 0;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (!e.is_parameter || !fixture.contains("after." + e.name)) continue;
    const std::vector<double> a = values(file_layout(e, *e.slot)), b = values(safetensors_tensor(fixture, "after." + e.name));
    ASSERT_EQ(a.size(), b.size()) << e.name;
    for (size_t i = 0; i < a.size(); ++i) off += std::abs(a[i] - b[i]) > 1e-6 + 1e-5 * std::abs(b[i]);
    elements += static_cast<int64_t>(a.size());
    ++compared;
  }
  EXPECT_EQ(compared, 96);
  std::printf("after the step: %lld of %lld parameters off by more than 1e-6\n", static_cast<long long>(off),
              static_cast<long long>(elements));
  EXPECT_LE(off, elements / 10000) << "parameters after the Adam step";
}

}  // namespace
}  // namespace kestrel::yolo
