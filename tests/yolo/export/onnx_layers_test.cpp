// The module emitters: what each block becomes in ONNX, and the clear refusal of a module type
// the export does not know.
#include "yolo/export/onnx_layers.h"

#include "layers/blocks.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::onnx_export;

namespace {

std::vector<std::string> op_types(const onnx::GraphProto& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.node()) ops.push_back(n.op_type());
  return ops;
}

// A module of the reference that Kestrel's export has no form for.
class Focus : public layers::UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "models.common.Focus"; }
};

}  // namespace

TEST(OnnxLayers, ConvIsOneFoldedConvolutionAndSilu) {
  Generator gen(1);
  layers::Conv conv(3, 8, 3, 2, std::nullopt, gen);
  onnx::GraphProto graph;
  GraphBuilder g(&graph, onnx::TensorProto::FLOAT);
  emit_unary(g, conv, "images", "model.0");
  EXPECT_EQ(op_types(graph), (std::vector<std::string>{"Conv", "Sigmoid", "Mul"}));
  ASSERT_EQ(graph.initializer_size(), 2);
  EXPECT_EQ(graph.initializer(0).name(), "model.0.conv.weight");
  // OIHW, as ONNX's Conv wants; Kestrel's memory layout is OHWI.
  EXPECT_EQ(std::vector<int64_t>(graph.initializer(0).dims().begin(), graph.initializer(0).dims().end()),
            (std::vector<int64_t>{8, 3, 3, 3}));
  EXPECT_EQ(graph.initializer(1).name(), "model.0.conv.bias");
  std::map<std::string, std::vector<int64_t>> attrs;
  for (const auto& a : graph.node(0).attribute()) attrs[a.name()] = {a.ints().begin(), a.ints().end()};
  EXPECT_EQ(attrs["strides"], (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(attrs["pads"], (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(OnnxLayers, BlocksAreWiredAsTheReference) {
  Generator gen(2);
  onnx::GraphProto graph;
  GraphBuilder g(&graph, onnx::TensorProto::FLOAT);
  layers::Bottleneck residual(16, 16, true, 0.5, gen);
  emit_unary(g, residual, "x", "model.1");
  EXPECT_EQ(op_types(graph), (std::vector<std::string>{"Conv", "Sigmoid", "Mul", "Conv", "Sigmoid", "Mul", "Add"}));

  graph.Clear();
  GraphBuilder g2(&graph, onnx::TensorProto::FLOAT);
  layers::SPPF sppf(16, 16, 5, gen);
  emit_unary(g2, sppf, "x", "model.9");
  std::vector<std::string> ops = op_types(graph);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "MaxPool"), 3);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Concat"), 1);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Conv"), 2);

  graph.Clear();
  GraphBuilder g3(&graph, onnx::TensorProto::FLOAT);
  layers::C3 c3(16, 32, 2, false, gen);
  emit_unary(g3, c3, "x", "model.2");
  ops = op_types(graph);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Conv"), 3 + 2 * 2);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Add"), 0);  // shortcut off
  EXPECT_EQ(graph.initializer(2).name(), "model.2.m.0.cv1.conv.weight");
}

TEST(OnnxLayers, UnknownModuleIsAClearError) {
  Focus focus;
  onnx::GraphProto graph;
  GraphBuilder g(&graph, onnx::TensorProto::FLOAT);
  try {
    emit_unary(g, focus, "images", "model.0");
    FAIL() << "a Focus module was exported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.0 is a models.common.Focus"), std::string::npos) << what;
    EXPECT_NE(what.find("Conv, Bottleneck, C3, SPPF"), std::string::npos) << what;
  }
}
