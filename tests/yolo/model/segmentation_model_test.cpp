// SegmentationModel against the reference's SegmentationModel (YOLOv5 v7.0's models/segment
// yamls): the model_info lines, parameter and module counts for n, s, m, l and x, and yolov5s-seg's
// layer table, as the reference printed them on PyTorch 2.15 with thop 0.1.1
// (`tests/scripts/segment_reference.py summary n s m l x`; the tables are parse_model's log);
// forward and decode shapes at 320; strides, anchors and the bias priors; the refusals; and a
// seeded reference yolov5n-seg saved as a stripped best.pt (tests/data/yolov5n_seg_seeded.pt,
// `segment_reference.py make`) read without Python: every tensor loads, and the forward in eval
// mode on a fixed input gives the reference's numbers (`segment_reference.py forward`).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "base/error.h"
#include "engine/autograd.h"
#include "tests/support/testing.h"
#include "yolo/common/shipped_files.h"
#include "yolo/model/model.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

namespace kestrel::yolo {
namespace {

using kestrel::testing::error_of;

ModelConfig seg_config(const std::string& size) {
  return load_model_config(find_shipped_file("yolov5" + size + "-seg.yaml", "--cfg"));
}

struct Reference {
  std::string size;
  int64_t parameters, modules;
  std::string summary, fused;
};

// The reference's numbers. Its fused line is printed by val.py and predict.py after attempt_load,
// whose weights carry no gradients ("0 gradients"); a freshly built model's fuse() prints the same
// line with its parameter count as gradients.
const std::vector<Reference> kReference = {
    {"n", 1991549, 225, "YOLOv5n-seg summary: 225 layers, 1991549 parameters, 1991549 gradients, 7.2 GFLOPs",
     "YOLOv5n-seg summary: 165 layers, 1986637 parameters, 0 gradients, 7.1 GFLOPs"},
    {"s", 7621277, 225, "YOLOv5s-seg summary: 225 layers, 7621277 parameters, 7621277 gradients, 26.6 GFLOPs",
     "YOLOv5s-seg summary: 165 layers, 7611485 parameters, 0 gradients, 26.4 GFLOPs"},
    {"m", 21990397, 302, "YOLOv5m-seg summary: 302 layers, 21990397 parameters, 21990397 gradients, 71.3 GFLOPs",
     "YOLOv5m-seg summary: 220 layers, 21971597 parameters, 0 gradients, 70.8 GFLOPs"},
    {"l", 47924957, 379, "YOLOv5l-seg summary: 379 layers, 47924957 parameters, 47924957 gradients, 148.4 GFLOPs",
     "YOLOv5l-seg summary: 275 layers, 47894397 parameters, 0 gradients, 147.7 GFLOPs"},
    {"x", 88819517, 456, "YOLOv5x-seg summary: 456 layers, 88819517 parameters, 88819517 gradients, 266.6 GFLOPs",
     "YOLOv5x-seg summary: 330 layers, 88774445 parameters, 0 gradients, 265.7 GFLOPs"},
};

TEST(SegmentationModel, CountsAndSummaryLinesAsTheReferencePrintsThem) {
  // The reference's Segment head (Proto included) and Proto parameters, and its Proto's width.
  const std::map<std::string, std::array<int64_t, 3>> head = {{"n", {234397, 76096, 64}},
                                                              {"s", {615133, 299584, 128}},
                                                              {"m", {1143325, 670528, 192}},
                                                              {"l", {1818973, 1188928, 256}},
                                                              {"x", {2642077, 1854784, 320}}};
  for (const Reference& r : kReference) {
    SegmentationModel model(seg_config(r.size));
    EXPECT_EQ(model.parameter_count(), r.parameters) << r.size;
    EXPECT_EQ(model.layer_count(), r.modules) << r.size;
    EXPECT_EQ(model.segment().parameter_count(), head.at(r.size)[0]) << r.size;
    EXPECT_EQ(model.segment().proto->parameter_count(), head.at(r.size)[1]) << r.size;
    EXPECT_EQ(model.segment().npr, head.at(r.size)[2]) << r.size;
    EXPECT_EQ(model.segment().no, 117) << r.size;
    EXPECT_EQ(model.summary(640), r.summary);
    EXPECT_EQ(model.summary(640, true), r.fused);
  }
}

TEST(SegmentationModel, LayerTableAsTheReferencePrintsIt) {
  SegmentationModel model(seg_config("s"));
  const std::vector<std::string> expected = {
      "  0                -1  1      3520  models.common.Conv                      [3, 32, 6, 2, 2]",
      "  2                -1  1     18816  models.common.C3                        [64, 64, 1]",
      "  4                -1  2    115712  models.common.C3                        [128, 128, 2]",
      "  9                -1  1    656896  models.common.SPPF                      [512, 512, 5]",
      " 11                -1  1         0  torch.nn.modules.upsampling.Upsample    [None, 2, 'nearest']",
      " 12           [-1, 6]  1         0  models.common.Concat                    [1]",
      " 13                -1  1    361984  models.common.C3                        [512, 256, 1, False]",
      " 19          [-1, 14]  1         0  models.common.Concat                    [1]",
      " 24      [17, 20, 23]  1    615133  models.yolo.Segment                     [80, [[10, 13, 16, 30, 33, 23], "
      "[30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]], 32, 128, [128, 256, 512]]",
  };
  std::map<int, std::string> lines;
  std::istringstream text(layer_table_text(model.layer_table()));
  for (std::string line; std::getline(text, line);) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (line.size() > 3 && std::isdigit(static_cast<unsigned char>(line[2])))
      lines[std::stoi(line.substr(0, 3))] = line;
  }
  ASSERT_EQ(lines.size(), 25u);
  for (const std::string& want : expected) EXPECT_EQ(lines[std::stoi(want.substr(0, 3))], want);
  EXPECT_EQ(model.describe(640).substr(0, layer_table_text(model.layer_table()).size()),
            layer_table_text(model.layer_table()));
}

TEST(SegmentationModel, ForwardAndPredictShapesAt320) {
  SegmentationModel model(seg_config("n"), 3);
  EXPECT_EQ(model.strides(), (std::vector<double>{8, 16, 32}));
  autograd::NoGradGuard no_grad;
  const Tensor x = kestrel::testing::random_tensor({2, 320, 320, 3}, 1, DType::F32, 0, 1);
  const SegmentationModel::Output out = model.forward(x);  // training mode: the raw outputs
  ASSERT_EQ(out.raw.size(), 3u);
  EXPECT_EQ(out.raw[0].shape(), (Shape{2, 3, 40, 40, 40}));  // 5 + 3 classes + 32 masks
  EXPECT_EQ(out.raw[1].shape(), (Shape{2, 3, 20, 20, 40}));
  EXPECT_EQ(out.raw[2].shape(), (Shape{2, 3, 10, 10, 40}));
  EXPECT_EQ(out.protos.shape(), (Shape{2, 80, 80, 32}));  // NHWC
  model.train(false);
  const SegmentationModel::Prediction p = model.predict(x);
  EXPECT_EQ(p.boxes.shape(), (Shape{2, 3 * (1600 + 400 + 100), 40}));
  EXPECT_EQ(p.protos.shape(), (Shape{2, 80, 80, 32}));
  EXPECT_EQ(p.raw.size(), 3u);
  const std::vector<Shape> shapes = model.layer_output_shapes(x);
  ASSERT_EQ(shapes.size(), 25u);
  EXPECT_EQ(shapes[17], (Shape{2, 40, 40, 64}));
  EXPECT_EQ(shapes[24], (Shape{2, 3, 40, 40, 40}));
}

TEST(SegmentationModel, AnchorsInStrideUnitsAndTheDetectPartsBiasPriors) {
  SegmentationModel model(seg_config("n"));
  const layers::Segment& s = model.segment();
  const std::vector<float> anchors = s.anchors.to_vector<float>();
  EXPECT_FLOAT_EQ(anchors[0], 10.0f / 8);
  EXPECT_FLOAT_EQ(anchors[1], 13.0f / 8);
  EXPECT_FLOAT_EQ(anchors.back(), 326.0f / 32);
  for (int64_t l = 0; l < 3; ++l) {
    const std::vector<float> b = s.convs[l]->bias.to_vector<float>();
    const double bound = 1 / std::sqrt(static_cast<double>(s.convs[l]->in_channels));  // the default init's
    const double obj = std::log(8.0 / std::pow(640.0 / s.strides[l], 2)), cls = std::log(0.6 / (80 - 0.99999));
    for (int64_t a = 0; a < 3; ++a) {
      EXPECT_NEAR(b[a * 117 + 4], obj, bound) << l;
      for (int64_t c = 0; c < 80; ++c) EXPECT_NEAR(b[a * 117 + 5 + c], cls, bound) << l;
      for (int64_t k = 85; k < 117; ++k) EXPECT_LE(std::abs(b[a * 117 + k]), bound) << l;  // masks: none
    }
  }
}

TEST(SegmentationModel, YamlReadsBackAndWrongHeadsAreRefused) {
  SegmentationModel a(seg_config("n"), 5);
  const ModelConfig back = parse_model_config(model_config_yaml(a.config()), "weights (its model yaml)");
  EXPECT_TRUE(is_segmentation_config(back));
  SegmentationModel b(back);
  EXPECT_EQ(a.parameter_count(), b.parameter_count());
  EXPECT_EQ(b.nc(), 5);

  EXPECT_NE(error_of([] { DetectionModel{seg_config("n")}; }).find("ends with Detect, not Segment"), std::string::npos);
  const ModelConfig detector = load_model_config(find_shipped_file("yolov5n.yaml", "--cfg"));
  EXPECT_FALSE(is_segmentation_config(detector));
  EXPECT_NE(error_of([&] { SegmentationModel{detector}; }).find("last row is Segment"), std::string::npos);
  ModelConfig bad = seg_config("n");
  bad.rows.back().args.pop_back();
  EXPECT_NE(error_of([&] { SegmentationModel{bad}; }).find("Segment takes [nc, anchors, nm, npr]"), std::string::npos);
  bad = seg_config("n");
  bad.rows.back().args[2].text = "0";
  EXPECT_NE(error_of([&] { SegmentationModel{bad}; }).find("nm 0 masks"), std::string::npos);
  bad = seg_config("n");
  std::swap(bad.rows[23], bad.rows[24]);  // Segment before the last row
  EXPECT_NE(error_of([&] { SegmentationModel{bad}; }), "");
}

// The fixed input of segment_reference.py, NHWC: x[0, y, x, c] = ((7c + 3y + 5x) % 17) / 16.
Tensor fixed_input() {
  std::vector<float> v;
  for (int y = 0; y < 96; ++y)
    for (int x = 0; x < 128; ++x)
      for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>((7 * c + 3 * y + 5 * x) % 17) / 16);
  return Tensor::from_vector(v, {1, 96, 128, 3});
}

struct Recorded {
  double sum, abs;
  std::vector<std::pair<int64_t, double>> samples;  // flat index in the reference's layout, value
};

// float32 against float32 through some 60 layers, summed in other orders: the sums within 1e-5 of
// the sum of magnitudes, each sample within 1e-4 (relative above 1).
void expect_matches(const Tensor& t, const Recorded& r, const std::string& what) {
  const std::vector<double> v = t.contiguous().to_double_vector();
  double sum = 0, abs = 0;
  for (double x : v) sum += x, abs += std::abs(x);
  EXPECT_NEAR(sum, r.sum, 1e-5 * r.abs) << what;
  EXPECT_NEAR(abs, r.abs, 1e-5 * r.abs) << what;
  for (const auto& [i, want] : r.samples)
    EXPECT_NEAR(v.at(i), want, 1e-4 * std::max(1.0, std::abs(want))) << what << " [" << i << "]";
}

TEST(SegmentationModel, LoadsTheReferencesSeededYolov5nSegAndForwardsAsIt) {
  const std::string path = "tests/data/yolov5n_seg_seeded.pt";
  const SafetensorsFile f = read_weights_file(path);
  EXPECT_EQ(f.metadata().at("task"), "segment");
  EXPECT_EQ(f.metadata().at("nc"), "80");
  EXPECT_EQ(f.metadata().at("model_yaml_file"), "yolov5n-seg.yaml");
  const ModelConfig config = parse_model_config(f.metadata().at("model_yaml"), path);
  ASSERT_TRUE(is_segmentation_config(config));
  SegmentationModel model(config, std::stoi(f.metadata().at("nc")));
  // Every tensor by name and shape (load_weights refuses a missing, extra or reshaped one).
  EXPECT_EQ(f.names().size(), 367u);
  EXPECT_EQ(model.state_entries().size(), 367u);
  for (const layers::StateEntry& e : model.state_entries()) EXPECT_TRUE(f.contains("model." + e.name)) << e.name;
  EXPECT_TRUE(f.contains("model.model.24.proto.cv3.bn.running_var"));
  EXPECT_EQ(f.entry("model.model.24.m.0.weight").shape, (Shape{351, 64, 1, 1}));
  EXPECT_EQ(f.entry("model.model.24.proto.cv1.conv.weight").shape, (Shape{64, 64, 3, 3}));
  EXPECT_EQ(load_inference_weights(model, path), "model.");

  model.train(false);
  autograd::NoGradGuard no_grad;
  const SegmentationModel::Prediction p = model.predict(fixed_input());
  // Recorded by `segment_reference.py forward tests/data/yolov5n_seg_seeded.pt` (PyTorch 2.15).
  expect_matches(p.raw[0], {-228401.296, 230288.23,
                 {{0, -0.0166260209}, {22464, 0.205467924}, {33696, 0.206843704}, {67391, 0.0723446012}}}, "raw0");
  expect_matches(p.raw[1], {-56964.8724, 57333.0301,
                 {{0, -0.0228163414}, {5616, -0.0122457184}, {8424, -0.0132122114}, {16847, -0.178729028}}}, "raw1");
  expect_matches(p.raw[2], {-14184.2571, 14279.072,
                 {{0, 0.0594824851}, {1404, 0.0425628424}, {2106, 0.0419760011}, {4211, 0.0233036205}}}, "raw2");
  ASSERT_EQ(p.boxes.shape(), (Shape{1, 756, 117}));
  expect_matches(p.boxes, {143117.437, 145146.731,
                 {{0, 3.93349695}, {29484, 100.823685}, {44226, 84.8363037}, {88451, 0.0233036205}}}, "decoded");
  expect_matches(p.boxes.slice(2, 4, 85), {462.713869, 462.713869,
                 {{0, 0.00130380481}, {20412, 0.00123446388}, {30618, 0.00123572676}, {61235, 0.00721435249}}}, "scores");
  expect_matches(p.boxes.slice(2, 85, 117), {44.4319111, 2073.7251,
                 {{0, 0.0508862473}, {8064, 0.163716406}, {12096, 0.165157154}, {24191, 0.0233036205}}}, "masks");
  ASSERT_EQ(p.protos.shape(), (Shape{1, 24, 32, 32}));
  expect_matches(p.protos.permute({0, 3, 1, 2}), {946.703424, 2640.71388,
                 {{0, -0.140341297}, {8192, 0.0920567438}, {12288, 0.526536644}, {24575, 0.0137756644}}}, "protos (NCHW)");
}

}  // namespace
}  // namespace kestrel::yolo
