// ClassificationModel against the reference's: ClassificationModel(model=DetectionModel(yaml),
// nc=1000, cutoff=10) for n, s, m, l and x, as its model_info prints them at 224 (with thop),
// recorded from YOLOv5 v7.0 on PyTorch 2.15; the cut (Classify in place of layer 9, reading
// layer 8); the yaml a classifier's weights carry reads back to the same model; the head remade
// for another class count; and the refusals.
#include <gtest/gtest.h>

#include "base/error.h"
#include "engine/autograd.h"
#include "yolo/common/shipped_files.h"
#include "yolo/model/classification_model.h"
#include "yolo/model/model.h"

namespace kestrel::yolo {
namespace {

ModelConfig detector(const std::string& size) {
  return load_model_config(find_shipped_file("yolov5" + size + ".yaml", "--cfg"));
}

TEST(ClassificationModel, SummaryLinesAsTheReferencePrintsThem) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"n", "Model summary: 118 layers, 2493000 parameters, 2493000 gradients, 0.5 GFLOPs"},
      {"s", "Model summary: 118 layers, 5453480 parameters, 5453480 gradients, 1.4 GFLOPs"},
      {"m", "Model summary: 167 layers, 12957640 parameters, 12957640 gradients, 3.9 GFLOPs"},
      {"l", "Model summary: 216 layers, 26552680 parameters, 26552680 gradients, 8.5 GFLOPs"},
      {"x", "Model summary: 265 layers, 48097160 parameters, 48097160 gradients, 16.0 GFLOPs"}};
  for (const auto& [size, line] : expected) {
    ClassificationModel model(classifier_config(detector(size), 1000));
    EXPECT_EQ(model.summary(224), line) << size;
  }
}

TEST(ClassificationModel, CutReplacesLayerNineAndReadsLayerEight) {
  ClassificationModel model(classifier_config(detector("n"), 10));
  ASSERT_EQ(model.layers().size(), 10u);
  EXPECT_EQ(model.layer_table().back().type, "models.common.Classify");
  EXPECT_EQ(model.layer_table().back().args, "[256, 10]");
  EXPECT_EQ(model.parameter_count(), 1224810);  // the reference's, nc=10
  const auto params = model.named_parameters();
  EXPECT_EQ(params.back().first, "model.9.linear.bias");
  autograd::NoGradGuard no_grad;
  model.train(false);
  const Tensor logits = model.forward(Tensor::zeros({2, 64, 64, 3}));
  EXPECT_EQ(logits.shape(), (Shape{2, 10}));
}

TEST(ClassificationModel, YamlReadsBackToTheSameModel) {
  ClassificationModel a(classifier_config(detector("s"), 7, 8), 3);
  const ModelConfig back = parse_model_config(model_config_yaml(a.config()), "weights (its model yaml)");
  EXPECT_TRUE(is_classifier_config(back));
  ClassificationModel b(back, 3);
  EXPECT_EQ(a.parameter_count(), b.parameter_count());
  ASSERT_EQ(a.layer_table().size(), b.layer_table().size());
  for (size_t i = 0; i < a.layer_table().size(); ++i) EXPECT_EQ(a.layer_table()[i].args, b.layer_table()[i].args) << i;
}

TEST(ClassificationModel, SetClassesRemakesTheHead) {
  ClassificationModel model(classifier_config(detector("n"), 10));
  const Tensor conv_before = model.head().conv->conv->weight.contiguous().to(Device::cpu());
  const std::vector<float> before(conv_before.data<float>(), conv_before.data<float>() + conv_before.numel());
  model.set_classes(3, 1);
  EXPECT_EQ(model.nc(), 3);
  EXPECT_EQ(model.head().linear->weight.shape(), (Shape{3, 1280}));
  EXPECT_EQ(model.layer_table().back().args, "[256, 3]");
  const Tensor conv_after = model.head().conv->conv->weight.contiguous();
  EXPECT_EQ(before, std::vector<float>(conv_after.data<float>(), conv_after.data<float>() + conv_after.numel()));
  autograd::NoGradGuard no_grad;
  model.train(false);
  EXPECT_EQ(model.forward(Tensor::zeros({1, 32, 32, 3})).shape(), (Shape{1, 3}));
}

TEST(ClassificationModel, RefusesBadCutsAndDetectorsWhereAClassifierBelongs) {
  EXPECT_THROW(classifier_config(detector("n"), 10, 1), Error);
  EXPECT_THROW(classifier_config(detector("n"), 10, 25), Error);
  EXPECT_THROW(classifier_config(detector("n"), 10, 13), Error);  // layer 12 is a Concat
  EXPECT_THROW(ClassificationModel{detector("n")}, Error);
  const ModelConfig cls = classifier_config(detector("n"), 10);
  EXPECT_THROW(classifier_config(cls, 10), Error);
  EXPECT_THROW(DetectionModel{cls}, Error);
}

}  // namespace
}  // namespace kestrel::yolo
