#include "yolo/export/onnx_graph.h"

namespace kestrel::yolo::onnx_export {

Attribute int_attr(const std::string& name, int64_t value) { return {name, {value}, false, "", false}; }
Attribute ints_attr(const std::string& name, std::vector<int64_t> values) {
  return {name, std::move(values), true, "", false};
}
Attribute string_attr(const std::string& name, const std::string& value) { return {name, {}, false, value, true}; }

GraphBuilder::GraphBuilder(onnx::GraphProto* graph, int32_t float_type)
    : graph_(graph), float_type_(float_type) {
  KESTREL_CHECK(float_type == onnx::TensorProto::FLOAT || float_type == onnx::TensorProto::FLOAT16,
                "GraphBuilder: the graph's float type must be FLOAT or FLOAT16");
}

std::string GraphBuilder::unique(const std::string& base) {
  const int n = used_[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

std::vector<std::string> GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                                            const std::string& scope, int outputs,
                                            const std::vector<Attribute>& attributes) {
  onnx::NodeProto* n = graph_->add_node();
  const std::string name = unique(scope + "/" + op);
  n->set_name(name);
  n->set_op_type(op);
  for (const auto& in : inputs) n->add_input(in);
  std::vector<std::string> outs;
  for (int i = 0; i < outputs; ++i) {
    outs.push_back(name + "_output_" + std::to_string(i));
    n->add_output(outs.back());
  }
  for (const Attribute& a : attributes) {
    onnx::AttributeProto* p = n->add_attribute();
    p->set_name(a.name);
    if (a.is_string) {
      p->set_type(onnx::AttributeProto::STRING);
      p->set_s(a.text);
    } else if (a.is_list) {
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
    } else {
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(a.ints.at(0));
    }
  }
  return outs;
}

std::string GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                               const std::string& scope, const std::vector<Attribute>& attributes) {
  return node(op, inputs, scope, 1, attributes)[0];
}

std::string GraphBuilder::initializer(const std::string& name, const Tensor& values) {
  return add_initializer(name, values, float_type_);
}

std::string GraphBuilder::float32_initializer(const std::string& name, const std::vector<float>& values,
                                              const std::vector<int64_t>& dims) {
  return add_initializer(name, Tensor::from_vector(values, dims), onnx::TensorProto::FLOAT);
}

std::string GraphBuilder::add_initializer(const std::string& name, const Tensor& values, int32_t type) {
  KESTREL_CHECK(is_floating(values.dtype()), "ONNX export: initializer ", name, " is ",
                dtype_name(values.dtype()), ", expected a floating-point tensor");
  KESTREL_CHECK(used_.count(name) == 0, "ONNX export: two initializers named ", name);
  used_[name] = 1;
  const DType storage = type == onnx::TensorProto::FLOAT16 ? DType::F16 : DType::F32;
  const Tensor host = values.to(Device::cpu()).to(storage).contiguous();
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : host.shape()) t->add_dims(d);
  t->set_raw_data(host.data_ptr(), static_cast<size_t>(host.numel()) * dtype_size(storage));
  return name;
}

std::string GraphBuilder::initializer(const std::string& name, const std::vector<float>& values,
                                      const std::vector<int64_t>& dims) {
  return initializer(name, Tensor::from_vector(values, dims));
}

std::string GraphBuilder::int64_initializer(const std::string& name, const std::vector<int64_t>& values,
                                            const std::vector<int64_t>& dims) {
  KESTREL_CHECK(used_.count(name) == 0, "ONNX export: two initializers named ", name);
  used_[name] = 1;
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
  return name;
}

void GraphBuilder::rename_output(const std::string& from, const std::string& to) {
  for (onnx::NodeProto& n : *graph_->mutable_node())
    for (std::string& in : *n.mutable_input())
      KESTREL_CHECK(in != from, "ONNX export: cannot rename ", from, ", which ", n.name(), " reads");
  for (onnx::NodeProto& n : *graph_->mutable_node())
    for (std::string& out : *n.mutable_output())
      if (out == from) {
        out = to;
        return;
      }
  KESTREL_FAIL("ONNX export: no node output named ", from);
}

}  // namespace kestrel::yolo::onnx_export
