#include "yolo/export/onnx_classify.h"

#include "yolo/export/onnx_layers.h"

namespace kestrel::yolo::onnx_export {

std::string emit_classify(GraphBuilder& g, layers::Classify& head, const std::vector<std::string>& inputs,
                          const std::string& scope) {
  const std::string x = inputs.size() == 1 ? inputs[0] : emit_concat(g, inputs, scope);
  const std::string features = emit_unary(g, *head.conv, x, scope + ".conv");
  const std::string pooled = g.node("GlobalAveragePool", {features}, scope + "/pool");
  const std::string flat = g.node("Flatten", {pooled}, scope + "/flatten", {int_attr("axis", 1)});
  const std::string w = g.initializer(scope + ".linear.weight", head.linear->weight);
  const std::string b = g.initializer(scope + ".linear.bias", head.linear->bias);
  return g.node("Gemm", {flat, w, b}, scope + "/linear", {int_attr("transB", 1)});
}

}  // namespace kestrel::yolo::onnx_export
