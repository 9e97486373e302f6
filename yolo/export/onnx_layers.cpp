#include "yolo/export/onnx_layers.h"

#include "engine/ops/fold_bn.h"
#include "layers/blocks.h"

namespace kestrel::yolo::onnx_export {
namespace {

Tensor host_f32(const Tensor& t) { return t.to(Device::cpu()).to(DType::F32); }

// Conv2d(x, w, b) + BN with running statistics + SiLU, as one convolution with the BN folded into
// its weights (the reference's fuse_conv_and_bn, which its export runs first) and x * sigmoid(x).
std::string emit_conv(GraphBuilder& g, layers::Conv& m, const std::string& x, const std::string& scope) {
  const layers::Conv2d& c = *m.conv;
  const layers::BatchNorm2d& bn = *m.bn;
  const ops::FoldedConv f = ops::fold_batch_norm(host_f32(c.weight), host_f32(bn.weight), host_f32(bn.bias),
                                                 host_f32(bn.running_mean), host_f32(bn.running_var), bn.eps);
  // Kestrel keeps conv weights OHWI in memory; ONNX's Conv wants OIHW.
  const std::string w = g.initializer(scope + ".conv.weight", f.weight.permute({0, 3, 1, 2}).contiguous());
  const std::string b = g.initializer(scope + ".conv.bias", f.bias);
  const int64_t k = c.kernel, s = c.stride, p = c.padding;
  const std::string y = g.node("Conv", {x, w, b}, scope + "/conv",
                               {ints_attr("dilations", {1, 1}), int_attr("group", 1), ints_attr("kernel_shape", {k, k}),
                                ints_attr("pads", {p, p, p, p}), ints_attr("strides", {s, s})});
  const std::string sig = g.node("Sigmoid", {y}, scope + "/act");
  return g.node("Mul", {y, sig}, scope + "/act");
}

std::string emit_max_pool(GraphBuilder& g, const layers::MaxPool2d& m, const std::string& x,
                          const std::string& scope) {
  const int64_t k = m.kernel, s = m.stride, p = m.padding;
  return g.node("MaxPool", {x}, scope,
                {int_attr("ceil_mode", 0), ints_attr("kernel_shape", {k, k}), ints_attr("pads", {p, p, p, p}),
                 ints_attr("strides", {s, s})});
}

// Nearest x2 as the reference's nn.Upsample(None, 2, 'nearest') exports: Resize with scales.
std::string emit_upsample(GraphBuilder& g, const std::string& x, const std::string& scope) {
  const std::string roi = g.float32_initializer(scope + ".roi", {}, {0});
  const std::string scales = g.float32_initializer(scope + ".scales", {1, 1, 2, 2}, {4});
  return g.node("Resize", {x, roi, scales}, scope,
                {string_attr("coordinate_transformation_mode", "asymmetric"),
                 string_attr("mode", "nearest"), string_attr("nearest_mode", "floor")});
}

}  // namespace

std::string emit_concat(GraphBuilder& g, const std::vector<std::string>& inputs, const std::string& scope) {
  return g.node("Concat", inputs, scope, {int_attr("axis", 1)});
}

std::string emit_unary(GraphBuilder& g, layers::Module& module, const std::string& x, const std::string& scope) {
  if (auto* m = dynamic_cast<layers::Conv*>(&module)) return emit_conv(g, *m, x, scope);
  if (auto* m = dynamic_cast<layers::Bottleneck*>(&module)) {
    const std::string y = emit_conv(g, *m->cv2, emit_conv(g, *m->cv1, x, scope + ".cv1"), scope + ".cv2");
    return m->add ? g.node("Add", {x, y}, scope) : y;
  }
  if (auto* m = dynamic_cast<layers::C3*>(&module)) {
    const std::string a = emit_unary(g, *m->m, emit_conv(g, *m->cv1, x, scope + ".cv1"), scope + ".m");
    const std::string b = emit_conv(g, *m->cv2, x, scope + ".cv2");
    return emit_conv(g, *m->cv3, emit_concat(g, {a, b}, scope), scope + ".cv3");
  }
  if (auto* m = dynamic_cast<layers::SPPF*>(&module)) {
    const std::string a = emit_conv(g, *m->cv1, x, scope + ".cv1");
    std::vector<std::string> pyramid{a};
    for (int i = 0; i < 3; ++i) pyramid.push_back(emit_unary(g, *m->m, pyramid.back(), scope + ".m"));
    return emit_conv(g, *m->cv2, emit_concat(g, pyramid, scope), scope + ".cv2");
  }
  if (auto* m = dynamic_cast<layers::MaxPool2d*>(&module)) return emit_max_pool(g, *m, x, scope);
  if (dynamic_cast<layers::Upsample*>(&module)) return emit_upsample(g, x, scope);
  if (auto* m = dynamic_cast<layers::Sequential*>(&module)) {
    std::string y = x;
    for (size_t i = 0; i < m->items().size(); ++i)
      y = emit_unary(g, *m->items()[i], y, scope + "." + std::to_string(i));
    return y;
  }
  KESTREL_FAIL("ONNX export: ", scope, " is a ", module.type_name(),
               ", which the export cannot write; it writes Conv, Bottleneck, C3, SPPF, MaxPool2d, ",
               "nn.Upsample, Concat and Detect (the modules of YOLOv5 n/s/m/l/x and their P6 variants)");
}

}  // namespace kestrel::yolo::onnx_export
