// The exported ONNX graph against Kestrel's own forward, run in OpenCV's DNN module (the runtime
// of many YOLOv5 deployments): yolov5n and yolov5s with random weights and random BatchNorm
// statistics (so the folding is exercised), fixed shapes and --dynamic at other sizes and batches.
// Kestrel's side runs conv -> BN -> SiLU unfolded (eval mode with autograd on), so the graph's
// folded weights are checked against the unfolded arithmetic. Tolerance 1e-3 absolute: boxes are
// in pixels up to ~4·anchor (~1.5e3), where float32 spacing is ~1e-4 and the two runtimes sum
// convolutions in different orders. Also: the graph's inputs, outputs, opset and metadata, and
// the options the export refuses.
#include "yolo/export/onnx_export.h"

#include <opencv2/dnn.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/autograd.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

// A model with random weights (the seed's initialisation) and random BN affine parameters and
// running statistics: identity-like BN would make folding a no-op.
std::unique_ptr<DetectionModel> random_model(const std::string& name, uint64_t seed) {
  auto m = std::make_unique<DetectionModel>(load_model_config("models/" + name + ".yaml"), std::nullopt, seed);
  autograd::NoGradGuard no_grad;
  uint64_t s = seed * 1000;
  m->visit([&](layers::Module& module) {
    auto* bn = dynamic_cast<layers::BatchNorm2d*>(&module);
    if (!bn) return;
    const Shape c = bn->weight.shape();
    bn->weight.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, 0.5, 1.5));
    bn->bias.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, -0.2, 0.2));
    bn->running_mean.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, -0.3, 0.3));
    bn->running_var.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, 0.5, 2.0));
  });
  m->train(false);
  return m;
}

std::string export_to(const DetectionModel& m, const OnnxExportOptions& o, const std::string& file) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_onnx_export_test";
  fs::create_directories(dir);
  const std::string path = (dir / file).string();
  save_onnx_model(build_onnx_model(m, o), path);
  return path;
}

struct Input {
  Tensor nhwc;   // Kestrel's layout
  cv::Mat nchw;  // OpenCV's blob
};

Input random_images(int64_t batch, int64_t h, int64_t w, uint64_t seed) {
  Input in;
  const Tensor nchw = kestrel::testing::random_tensor({batch, 3, h, w}, seed, DType::F32, 0.0, 1.0);
  in.nhwc = nchw.permute({0, 2, 3, 1}).contiguous();
  const int dims[] = {static_cast<int>(batch), 3, static_cast<int>(h), static_cast<int>(w)};
  in.nchw = cv::Mat(4, dims, CV_32F);
  const std::vector<float> v = nchw.to_vector<float>();
  std::copy(v.begin(), v.end(), in.nchw.ptr<float>());
  return in;
}

// Max |OpenCV(graph) - Kestrel| over the whole output; shapes must agree.
double max_abs_difference(cv::dnn::Net& net, DetectionModel& m, const Input& in) {
  net.setInput(in.nchw, "images");
  const cv::Mat got = net.forward("output0");
  const Tensor want = m.predict(in.nhwc).boxes;  // autograd on: the unfolded conv -> BN -> SiLU
  EXPECT_EQ(got.dims, 3);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(got.size[d], want.size(d)) << "dimension " << d;
  if (got.total() != static_cast<size_t>(want.numel())) return INFINITY;
  const std::vector<float> w = want.contiguous().to_vector<float>();
  const float* g = got.ptr<float>();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(g[i]) - w[i]));
  return worst;
}

void expect_matches_in_opencv(const std::string& name, bool dynamic,
                              const std::vector<std::array<int64_t, 3>>& runs) {
  auto m = random_model(name, 7);
  OnnxExportOptions o;
  o.batch = runs[0][0];
  o.height = runs[0][1];
  o.width = runs[0][2];
  o.dynamic = dynamic;
  const std::string path = export_to(*m, o, name + (dynamic ? "_dynamic" : "_fixed") + ".onnx");
  cv::dnn::Net net = cv::dnn::readNetFromONNX(path);
  for (const auto& [batch, h, w] : runs) {
    const double diff = max_abs_difference(net, *m, random_images(batch, h, w, 11 + h + w));
    std::printf("%s %s batch %lld %lldx%lld: max |OpenCV DNN - Kestrel| = %.3g\n", name.c_str(),
                dynamic ? "dynamic" : "fixed", static_cast<long long>(batch), static_cast<long long>(h),
                static_cast<long long>(w), diff);
    EXPECT_LT(diff, 1e-3) << name << " batch " << batch << " " << h << "x" << w;
  }
}

}  // namespace

TEST(OnnxExport, Yolov5nFixedShapeMatchesInOpenCv) { expect_matches_in_opencv("yolov5n", false, {{1, 320, 320}}); }

TEST(OnnxExport, Yolov5sFixedShapeMatchesInOpenCv) { expect_matches_in_opencv("yolov5s", false, {{2, 256, 320}}); }

TEST(OnnxExport, Yolov5nDynamicShapesMatchInOpenCv) {
  expect_matches_in_opencv("yolov5n", true, {{1, 320, 320}, {2, 192, 256}, {1, 320, 128}});
}

TEST(OnnxExport, Yolov5sDynamicShapesMatchInOpenCv) {
  expect_matches_in_opencv("yolov5s", true, {{1, 256, 256}, {3, 128, 192}});
}

TEST(OnnxExport, GraphHasTheReferencesInterface) {
  auto m = random_model("yolov5n", 3);
  OnnxExportOptions o;
  o.height = 320;
  o.width = 256;
  std::vector<std::string> names(80);
  for (int i = 0; i < 80; ++i) names[i] = "class" + std::to_string(i);
  names[1] = "it's";
  o.names = names;
  const onnx::ModelProto fixed = build_onnx_model(*m, o);
  EXPECT_EQ(fixed.opset_import(0).version(), 12);
  EXPECT_EQ(fixed.ir_version(), 7);
  ASSERT_EQ(fixed.graph().input_size(), 1);
  ASSERT_EQ(fixed.graph().output_size(), 1);
  EXPECT_EQ(fixed.graph().input(0).name(), "images");
  EXPECT_EQ(fixed.graph().output(0).name(), "output0");
  const auto& out = fixed.graph().output(0).type().tensor_type();
  EXPECT_EQ(out.elem_type(), onnx::TensorProto::FLOAT);
  // 3 anchors x (40x32 + 20x16 + 10x8) cells, 85 values each.
  ASSERT_EQ(out.shape().dim_size(), 3);
  EXPECT_EQ(out.shape().dim(1).dim_value(), 3 * (40 * 32 + 20 * 16 + 10 * 8));
  EXPECT_EQ(out.shape().dim(2).dim_value(), 85);
  std::map<std::string, std::string> meta;
  for (const auto& p : fixed.metadata_props()) meta[p.key()] = p.value();
  EXPECT_EQ(meta["stride"], "32");
  EXPECT_EQ(meta["names"].substr(0, 51), "{0: 'class0', 1: \"it's\", 2: 'class2', 3: 'class3', ");
  // No BatchNormalization node: every BN is folded into its convolution.
  for (const auto& n : fixed.graph().node()) EXPECT_NE(n.op_type(), "BatchNormalization");

  o.dynamic = true;
  o.opset = 13;
  const onnx::ModelProto dyn = build_onnx_model(*m, o);
  const auto& in = dyn.graph().input(0).type().tensor_type().shape();
  EXPECT_EQ(in.dim(0).dim_param(), "batch");
  EXPECT_EQ(in.dim(1).dim_value(), 3);
  EXPECT_EQ(in.dim(2).dim_param(), "height");
  EXPECT_EQ(in.dim(3).dim_param(), "width");
  const auto& dout = dyn.graph().output(0).type().tensor_type().shape();
  EXPECT_EQ(dout.dim(0).dim_param(), "batch");
  EXPECT_EQ(dout.dim(1).dim_param(), "anchors");
  EXPECT_EQ(dout.dim(2).dim_value(), 85);
  EXPECT_EQ(dyn.opset_import(0).version(), 13);
}

TEST(OnnxExport, DefaultNamesAreTheReferences) {
  EXPECT_EQ(python_names_dict({"0", "1"}), "{0: '0', 1: '1'}");
  EXPECT_EQ(python_names_dict({"a\\b", "say \"hi\"", "both ' \""}), "{0: 'a\\\\b', 1: 'say \"hi\"', 2: 'both \\' \"'}");
  auto m = random_model("yolov5n", 1);
  const onnx::ModelProto g = build_onnx_model(*m, OnnxExportOptions{});
  std::map<std::string, std::string> meta;
  for (const auto& p : g.metadata_props()) meta[p.key()] = p.value();
  EXPECT_EQ(meta["names"].substr(0, 26), "{0: '0', 1: '1', 2: '2', 3");
}

TEST(OnnxExport, HalfWritesAFloat16Graph) {
  auto m = random_model("yolov5n", 2);
  OnnxExportOptions o;
  o.height = o.width = 128;
  o.half = true;
  const onnx::ModelProto g = build_onnx_model(*m, o);  // passes ONNX's checker and shape inference
  EXPECT_EQ(g.graph().input(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(g.graph().output(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT16);
  for (const auto& t : g.graph().initializer()) {
    if (t.name().ends_with(".roi") || t.name().ends_with(".scales")) continue;  // Resize's: float32 by definition
    EXPECT_TRUE(t.data_type() == onnx::TensorProto::FLOAT16 || t.data_type() == onnx::TensorProto::INT64) << t.name();
  }
}

TEST(OnnxExport, RefusesWhatItCannotWrite) {
  auto m = random_model("yolov5n", 1);
  auto refuses = [&](OnnxExportOptions o, const std::string& message) {
    try {
      build_onnx_model(*m, o);
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  OnnxExportOptions o;
  o.height = 300;
  refuses(o, "multiple of the model's largest stride 32");
  o = {};
  o.opset = 11;
  refuses(o, "opset 11 is not available");
  o.opset = max_onnx_opset() + 1;
  refuses(o, "is not available");
  o = {};
  o.half = o.dynamic = true;
  refuses(o, "--half and --dynamic");
  o = {};
  o.names = {"one", "two"};
  refuses(o, "2 class names for a model of 80 classes");
}

// A classifier (yolov5n cut at 10, random BN statistics) exports as the reference's: output0
// (batch, nc) logits, Classify as Conv, GlobalAveragePool, Flatten, Gemm; stride 32 and the names
// in the metadata; OpenCV DNN's run of the graph equals Kestrel's forward, fixed and dynamic.
TEST(OnnxExport, ClassifierMatchesInOpenCv) {
  ClassificationModel m(classifier_config(load_model_config("models/yolov5n.yaml"), 4), 3);
  {
    autograd::NoGradGuard no_grad;
    uint64_t s = 500;
    m.visit([&](layers::Module& module) {
      auto* bn = dynamic_cast<layers::BatchNorm2d*>(&module);
      if (!bn) return;
      const Shape c = bn->weight.shape();
      bn->running_mean.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, -0.3, 0.3));
      bn->running_var.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, 0.5, 2.0));
    });
  }
  m.train(false);
  for (const bool dynamic : {false, true}) {
    OnnxExportOptions o;
    o.batch = 2, o.height = 64, o.width = 96, o.dynamic = dynamic;
    o.names = {"a", "b", "c", "d"};
    const onnx::ModelProto proto = build_onnx_model(m, o);
    ASSERT_EQ(proto.graph().output_size(), 1);
    EXPECT_EQ(proto.graph().output(0).name(), "output0");
    EXPECT_EQ(proto.graph().output(0).type().tensor_type().shape().dim_size(), 2);
    bool has_names = false;
    for (const auto& p : proto.metadata_props())
      if (p.key() == "names") has_names = p.value() == "{0: 'a', 1: 'b', 2: 'c', 3: 'd'}";
    EXPECT_TRUE(has_names);
    const fs::path dir = fs::temp_directory_path() / "kestrel_onnx_export_test";
    fs::create_directories(dir);
    const std::string path = (dir / (dynamic ? "cls_dynamic.onnx" : "cls_fixed.onnx")).string();
    save_onnx_model(proto, path);
    cv::dnn::Net net = cv::dnn::readNetFromONNX(path);
    const Input in = random_images(dynamic ? 3 : 2, dynamic ? 32 : 64, dynamic ? 64 : 96, 21);
    net.setInput(in.nchw, "images");
    const cv::Mat got = net.forward("output0");
    const Tensor want = m.forward(in.nhwc);
    ASSERT_EQ(got.total(), static_cast<size_t>(want.numel()));
    const std::vector<float> w = want.contiguous().to_vector<float>();
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got.ptr<float>()[i]) - w[i]));
    std::printf("classifier %s: max |OpenCV DNN - Kestrel| = %.3g\n", dynamic ? "dynamic" : "fixed", worst);
    EXPECT_LT(worst, 1e-4);
  }
}

// A -seg model (yolov5n-seg, random BatchNorm statistics) exports as the reference's: output0
// (batch, anchors, 5 + nc + 32) with the boxes decoded and the mask coefficients raw, output1 the
// prototypes (batch, 32, h/4, w/4); OpenCV DNN's run equals Kestrel's predict, fixed and dynamic.
TEST(OnnxExport, SegmentationModelMatchesInOpenCv) {
  SegmentationModel m(load_model_config("models/yolov5n-seg.yaml"), 3, 5);
  {
    autograd::NoGradGuard no_grad;
    uint64_t s = 900;
    m.visit([&](layers::Module& module) {
      auto* bn = dynamic_cast<layers::BatchNorm2d*>(&module);
      if (!bn) return;
      const Shape c = bn->weight.shape();
      bn->running_mean.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, -0.3, 0.3));
      bn->running_var.copy_(kestrel::testing::random_tensor(c, ++s, DType::F32, 0.5, 2.0));
    });
  }
  m.train(false);
  for (const bool dynamic : {false, true}) {
    OnnxExportOptions o;
    o.batch = 1, o.height = 128, o.width = 160, o.dynamic = dynamic;
    const onnx::ModelProto proto = build_onnx_model(m, o);
    ASSERT_EQ(proto.graph().output_size(), 2);
    EXPECT_EQ(proto.graph().output(1).name(), "output1");
    const fs::path dir = fs::temp_directory_path() / "kestrel_onnx_export_test";
    fs::create_directories(dir);
    const std::string path = (dir / (dynamic ? "seg_dynamic.onnx" : "seg_fixed.onnx")).string();
    save_onnx_model(proto, path);
    cv::dnn::Net net = cv::dnn::readNetFromONNX(path);
    const Input in = random_images(dynamic ? 2 : 1, dynamic ? 96 : 128, dynamic ? 128 : 160, 31);
    net.setInput(in.nchw, "images");
    std::vector<cv::Mat> outs;
    net.forward(outs, std::vector<std::string>{"output0", "output1"});
    ASSERT_EQ(outs.size(), 2u);
    const SegmentationModel::Prediction want = m.predict(in.nhwc);
    auto worst = [](const cv::Mat& got, const Tensor& expected) {
      const std::vector<float> w = expected.contiguous().to_vector<float>();
      EXPECT_EQ(got.total(), w.size());
      double d = 0;
      for (size_t i = 0; i < std::min<size_t>(w.size(), got.total()); ++i)
        d = std::max(d, std::abs(static_cast<double>(got.ptr<float>()[i]) - w[i]));
      return d;
    };
    const double boxes = worst(outs[0], want.boxes);
    const double protos = worst(outs[1], want.protos.permute({0, 3, 1, 2}));
    std::printf("seg %s: max |OpenCV DNN - Kestrel| boxes %.3g, prototypes %.3g\n", dynamic ? "dynamic" : "fixed", boxes,
                protos);
    EXPECT_LT(boxes, 1e-3);
    EXPECT_LT(protos, 1e-4);
  }
}
