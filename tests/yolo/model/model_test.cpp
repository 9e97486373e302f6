// The model builder against the reference's published numbers: parameter counts, module counts
// and GFLOPs of yolov5n/s, layer output shapes, strides, anchors, the Detect bias priors, --nc.
#include "yolo/model/model.h"

#include <cmath>

#include "engine/autograd.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

DetectionModel build(const std::string& name, std::optional<int> nc = std::nullopt) {
  return DetectionModel(load_model_config("models/" + name + ".yaml"), nc, 0);
}

}  // namespace

TEST(Model, ScalingRulesMatchThePython) {
  EXPECT_EQ(round_half_even(0.99), 1);
  EXPECT_EQ(round_half_even(2.5), 2);  // Python's round(2.5) == 2
  EXPECT_EQ(round_half_even(3.5), 4);
  EXPECT_EQ(make_divisible(64 * 0.25, 8), 16);
  EXPECT_EQ(make_divisible(1024 * 0.75, 8), 768);
  EXPECT_EQ(make_divisible(20.1, 8), 24);
}

TEST(Model, Yolov5sMatchesTheReference) {
  DetectionModel m = build("yolov5s");
  EXPECT_EQ(m.parameter_count(), 7235389);
  EXPECT_EQ(m.layer_count(), 214);
  const std::string s = m.summary(640);
  EXPECT_EQ(s.substr(0, s.find(" GFLOPs") - 4),
            "YOLOv5s summary: 214 layers, 7235389 parameters, 7235389 gradients, ");
  EXPECT_NEAR(m.gflops(640), 16.5, 0.15);
  const auto& table = m.layer_table();
  ASSERT_EQ(table.size(), 25u);
  EXPECT_EQ(table[0].args, "[3, 32, 6, 2, 2]");
  EXPECT_EQ(table[0].params, 3520);
  EXPECT_EQ(table[2].args, "[64, 64, 1]");
  EXPECT_EQ(table[11].args, "[None, 2, 'nearest']");
  EXPECT_EQ(table[12].from, "[-1, 6]");
  EXPECT_EQ(table[13].args, "[512, 256, 1, False]");
  EXPECT_EQ(table[24].type, "models.yolo.Detect");
  EXPECT_EQ(table[24].params, 229245);
  EXPECT_EQ(table[24].args,
            "[80, [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, "
            "326]], [128, 256, 512]]");
}

TEST(Model, Yolov5nMatchesTheReference) {
  DetectionModel m = build("yolov5n");
  EXPECT_EQ(m.parameter_count(), 1872157);
  EXPECT_EQ(m.layer_count(), 214);
  EXPECT_NEAR(m.gflops(640), 4.5, 0.1);
}

// The summary lines as the reference prints them, GFLOPs included (thop's count: the Conv blocks'
// BatchNorms add 4 operations per element, so the trained model reads 4.6 where the fused one,
// which val, detect and export print after "Fusing layers... ", reads 4.5).
TEST(Model, SummaryLinesAsTheReferencePrintsThem) {
  DetectionModel n = build("yolov5n");
  EXPECT_EQ(n.summary(640), "YOLOv5n summary: 214 layers, 1872157 parameters, 1872157 gradients, 4.6 GFLOPs");
  EXPECT_EQ(n.summary(640, true), "YOLOv5n summary: 157 layers, 1867405 parameters, 0 gradients, 4.5 GFLOPs");
  DetectionModel s = build("yolov5s");
  EXPECT_EQ(s.summary(640), "YOLOv5s summary: 214 layers, 7235389 parameters, 7235389 gradients, 16.6 GFLOPs");
  EXPECT_EQ(s.summary(640, true), "YOLOv5s summary: 157 layers, 7225885 parameters, 0 gradients, 16.4 GFLOPs");
  // The figure itself: the convolutions' 2 x multiply-accumulates plus the BatchNorms' 8 x elements.
  EXPECT_NEAR(n.summary_gflops(640, false) - n.summary_gflops(640, true), 4 * 0.0236544, 1e-6);
}

TEST(Model, StridesAnchorsAndBiasPriors) {
  DetectionModel m = build("yolov5n");
  EXPECT_EQ(m.strides(), (std::vector<double>{8, 16, 32}));
  std::vector<float> a = m.detect().anchors.to_vector<float>();
  EXPECT_FLOAT_EQ(a[0], 10.0f / 8);   // P3 anchors in stride units
  EXPECT_FLOAT_EQ(a[17], 326.0f / 32);
  std::vector<float> b = m.detect().convs[0]->bias.to_vector<float>();
  // Default init is uniform in ±1/sqrt(fan_in); the priors move objectness and classes.
  const double bound = 1.0 / std::sqrt(64.0);
  EXPECT_NEAR(b[4], std::log(8.0 / std::pow(640.0 / 8, 2)), bound);
  EXPECT_NEAR(b[5], std::log(0.6 / (80 - 0.99999)), bound);
  EXPECT_LT(b[4], -6.0);
}

TEST(Model, OutputShapesAt640And320) {
  DetectionModel m = build("yolov5n", 3);
  autograd::NoGradGuard no_grad;
  for (int64_t size : {320, 640}) {
    std::vector<Tensor> out = m.forward(Tensor::zeros({1, size, size, 3}));
    ASSERT_EQ(out.size(), 3u);
    for (int l = 0; l < 3; ++l)
      EXPECT_EQ(out[l].shape(), (Shape{1, 3, size / (8 << l), size / (8 << l), 8})) << size;
  }
  m.train(false);
  DetectionModel::Prediction p = m.predict(Tensor::zeros({2, 320, 320, 3}));
  EXPECT_EQ(p.boxes.shape(), (Shape{2, 3 * (40 * 40 + 20 * 20 + 10 * 10), 8}));
}

TEST(Model, EveryLayerOutputShapeOfYolov5s) {
  DetectionModel m = build("yolov5s");
  autograd::NoGradGuard no_grad;
  m.train(false);
  for (int64_t size : {320, 640}) {
    std::vector<Shape> shapes = m.layer_output_shapes(Tensor::zeros({1, size, size, 3}));
    ASSERT_EQ(shapes.size(), 25u);
    // (stride, channels) of layers 0..23 in yolov5s, then Detect's P3 output.
    const int64_t expect[24][2] = {{2, 32},   {4, 64},   {4, 64},   {8, 128},  {8, 128},
                                   {16, 256}, {16, 256}, {32, 512}, {32, 512}, {32, 512},
                                   {32, 256}, {16, 256}, {16, 512}, {16, 256}, {16, 128},
                                   {8, 128},  {8, 256},  {8, 128},  {16, 128}, {16, 256},
                                   {16, 256}, {32, 256}, {32, 512}, {32, 512}};
    for (int i = 0; i < 24; ++i) {
      const int64_t s = size / expect[i][0];
      EXPECT_EQ(shapes[i], (Shape{1, s, s, expect[i][1]})) << "layer " << i << " at " << size;
    }
    EXPECT_EQ(shapes[24], (Shape{1, 3, size / 8, size / 8, 85}));
  }
}

TEST(Model, NcOverrideChangesTheHeadOnly) {
  DetectionModel m = build("yolov5s", 3);
  EXPECT_EQ(m.detect().no, 8);
  EXPECT_EQ(m.detect().convs[0]->weight.shape(), (Shape{24, 1, 1, 128}));
  EXPECT_THROW(build("yolov5s", 0), Error);
}

TEST(Model, UnsupportedModuleIsNamed) {
  ModelConfig c = load_model_config("models/yolov5n.yaml");
  c.rows[2].module = "C2f";
  try {
    DetectionModel m(c);
    FAIL() << "C2f accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported module 'C2f'"), std::string::npos);
  }
}
