// A thin builder over onnx::GraphProto (the ONNX library's own message classes): nodes with
// unique names, attributes, and initializers from Kestrel tensors in the export's float type.
// The exporters in this folder say *what* the graph computes; this file only spells it in ONNX.
#pragma once
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo::onnx_export {

// One node attribute: an int, a list of ints, or a string.
struct Attribute {
  std::string name;
  std::vector<int64_t> ints;
  bool is_list = false;
  std::string text;
  bool is_string = false;
};
Attribute int_attr(const std::string& name, int64_t value);
Attribute ints_attr(const std::string& name, std::vector<int64_t> values);
Attribute string_attr(const std::string& name, const std::string& value);

class GraphBuilder {
 public:
  // float_type: the element type of every floating-point tensor of the graph
  // (onnx::TensorProto::FLOAT, or FLOAT16 for a --half export).
  GraphBuilder(onnx::GraphProto* graph, int32_t float_type);

  int32_t float_type() const { return float_type_; }

  // Adds `op` named "<scope>/<op>" (numbered when the scope already has one) and returns the
  // name of its output (its outputs' names for several).
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   const std::string& scope, const std::vector<Attribute>& attributes = {});
  std::vector<std::string> node(const std::string& op, const std::vector<std::string>& inputs,
                                const std::string& scope, int outputs,
                                const std::vector<Attribute>& attributes);

  // A floating-point initializer from a tensor of any float dtype on any device, stored in the
  // graph's float type under `name` (which must be new), with the tensor's shape.
  std::string initializer(const std::string& name, const Tensor& values);
  // The same from host values with the given dims.
  std::string initializer(const std::string& name, const std::vector<float>& values,
                          const std::vector<int64_t>& dims);
  // Always float32, whatever the graph's float type (Resize's scales, which ONNX types so).
  std::string float32_initializer(const std::string& name, const std::vector<float>& values,
                                  const std::vector<int64_t>& dims);
  std::string int64_initializer(const std::string& name, const std::vector<int64_t>& values,
                                const std::vector<int64_t>& dims);

  // Gives the node output `from` the name `to` (a graph output's public name, "output0").
  void rename_output(const std::string& from, const std::string& to);

 private:
  std::string unique(const std::string& base);
  std::string add_initializer(const std::string& name, const Tensor& values, int32_t type);

  onnx::GraphProto* graph_;
  int32_t float_type_;
  std::map<std::string, int> used_;  // name -> times taken
};

}  // namespace kestrel::yolo::onnx_export
