#include "yolo/export/onnx_detect.h"

#include "yolo/export/onnx_layers.h"

namespace kestrel::yolo::onnx_export {
namespace {

// The cell indices (x, y) of every position of `feature` as a (batch, 2, ny, nx) tensor, counted
// from 1. They are computed from the feature map itself instead of baked in as constants, so one
// graph serves every batch size and image size (--dynamic) without Shape/Range arithmetic: a zero
// 1x1 convolution with bias 1 gives ones, and cumulative sums along x and along y count the cells.
// OpenCV 4.6's DNN sums correctly only along the last axis, hence the transposes for y; and
// CumSum takes no float16 before opset 14, hence the casts in a --half graph.
std::string emit_cell_indices(GraphBuilder& g, int64_t channels, const std::string& feature,
                              const std::string& scope) {
  const std::string zeros = g.initializer(scope + ".ones.weight", std::vector<float>(channels, 0.f), {1, channels, 1, 1});
  const std::string one = g.initializer(scope + ".ones.bias", std::vector<float>{1.f}, {1});
  std::string ones = g.node("Conv", {feature, zeros, one}, scope + "/ones",
                            {ints_attr("kernel_shape", {1, 1}), ints_attr("pads", {0, 0, 0, 0}), ints_attr("strides", {1, 1})});
  const bool half = g.float_type() == onnx::TensorProto::FLOAT16;
  if (half) ones = g.node("Cast", {ones}, scope + "/grid", {int_attr("to", int64_t{onnx::TensorProto::FLOAT})});
  const std::string last_axis = g.int64_initializer(scope + ".grid.axis", {3}, {});
  const std::string x = g.node("CumSum", {ones, last_axis}, scope + "/grid");
  const std::string ones_t = g.node("Transpose", {ones}, scope + "/grid", {ints_attr("perm", {0, 1, 3, 2})});
  const std::string y_t = g.node("CumSum", {ones_t, last_axis}, scope + "/grid");
  const std::string y = g.node("Transpose", {y_t}, scope + "/grid", {ints_attr("perm", {0, 1, 3, 2})});
  std::string cells = g.node("Concat", {x, y}, scope + "/grid", {int_attr("axis", 1)});
  if (half) cells = g.node("Cast", {cells}, scope + "/grid", {int_attr("to", int64_t{onnx::TensorProto::FLOAT16})});
  return cells;
}

// One level: (batch, na·no, ny, nx) raw outputs to (batch, na·ny·nx, no) decoded ones. With
// s = σ(raw) the decode is per channel c = a·no + o a quadratic in s plus a cell offset:
//   out = quad[c]·s² + lin[c]·s + offset[c](x, y)
//   xy: quad 0, lin 2·stride, offset stride·(cell − 0.5);  wh: quad 4·anchor_px, lin 0;  else lin 1.
// Channel-wise constants and one 1x1 convolution of the cell indices keep every operation 4-D and
// broadcast only over channels, which every ONNX runtime (OpenCV's DNN included) supports.
std::string emit_level(GraphBuilder& g, const layers::Detect& d, int64_t level, const std::string& feature,
                       const std::vector<float>& anchors_px, const std::string& scope) {
  const layers::Conv2d& conv = *d.convs[level];
  const int64_t na = d.na, no = d.no, c = na * no;
  const float stride = static_cast<float>(d.strides[level]);
  const std::string w = g.initializer(scope + ".weight", conv.weight.permute({0, 3, 1, 2}).contiguous());
  const std::string b = g.initializer(scope + ".bias", conv.bias);
  const std::string raw = g.node("Conv", {feature, w, b}, scope,
                                 {ints_attr("kernel_shape", {1, 1}), ints_attr("pads", {0, 0, 0, 0}), ints_attr("strides", {1, 1})});

  std::vector<float> quad(c, 0.f), lin(c, 1.f), offset_w(c * 2, 0.f), offset_b(c, 0.f);
  for (int64_t a = 0; a < na; ++a) {
    for (int64_t xy = 0; xy < 2; ++xy) {
      const int64_t ch = a * no + xy;
      lin[ch] = 2.f * stride;
      offset_w[ch * 2 + xy] = stride;
      offset_b[ch] = -1.5f * stride;  // cells count from 1; the reference's grid is cell - 0.5
    }
    for (int64_t wh = 0; wh < 2; ++wh) {
      const int64_t ch = a * no + 2 + wh;
      quad[ch] = 4.f * anchors_px[(level * na + a) * 2 + wh];
      lin[ch] = 0.f;
    }
    for (int64_t m = no - d.nm; m < no; ++m) lin[a * no + m] = 0.f;  // mask coefficients: raw (below)
  }
  const std::string s = g.node("Sigmoid", {raw}, scope + "/decode");
  const std::string s2 = g.node("Mul", {s, s}, scope + "/decode");
  const std::string q = g.node("Mul", {s2, g.initializer(scope + ".decode.quad", quad, {1, c, 1, 1})}, scope + "/decode");
  const std::string l = g.node("Mul", {s, g.initializer(scope + ".decode.lin", lin, {1, c, 1, 1})}, scope + "/decode");
  const std::string cells = emit_cell_indices(g, conv.in_channels, feature, scope);
  const std::string off = g.node("Conv", {cells, g.initializer(scope + ".decode.offset.weight", offset_w, {c, 2, 1, 1}),
                                          g.initializer(scope + ".decode.offset.bias", offset_b, {c})},
                                 scope + "/decode",
                                 {ints_attr("kernel_shape", {1, 1}), ints_attr("pads", {0, 0, 0, 0}), ints_attr("strides", {1, 1})});
  std::string out = g.node("Add", {g.node("Add", {q, l}, scope + "/decode"), off}, scope + "/decode");
  if (d.nm > 0) {  // a Segment's mask coefficients stay raw: their quad and lin are 0, raw is kept
    std::vector<float> keep(c, 0.f);
    for (int64_t a = 0; a < na; ++a)
      for (int64_t m = no - d.nm; m < no; ++m) keep[a * no + m] = 1.f;
    out = g.node("Add", {out, g.node("Mul", {raw, g.initializer(scope + ".decode.keep", keep, {1, c, 1, 1})}, scope + "/decode")},
                 scope + "/decode");
  }

  // (batch, na·no, ny, nx) -> (batch, na, no, ny·nx) -> (batch, na, ny·nx, no) -> (batch, na·ny·nx, no):
  // the reference's view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2).view(bs, -1, no). Reshape's 0
  // copies the batch dimension and -1 infers the rest, so no size is baked in.
  const std::string split = g.node("Reshape", {out, g.int64_initializer(scope + ".shape_levels", {0, na, no, -1}, {4})},
                                   scope + "/flatten");
  const std::string t = g.node("Transpose", {split}, scope + "/flatten", {ints_attr("perm", {0, 1, 3, 2})});
  return g.node("Reshape", {t, g.int64_initializer(scope + ".shape_rows", {0, -1, no}, {3})}, scope + "/flatten");
}

}  // namespace

std::string emit_detect(GraphBuilder& g, const layers::Detect& detect, const std::vector<std::string>& features,
                        const std::string& scope) {
  KESTREL_CHECK(static_cast<int64_t>(features.size()) == detect.nl, "ONNX export: ", scope, " (Detect) has ",
                detect.nl, " levels but ", features.size(), " inputs");
  KESTREL_CHECK(static_cast<int64_t>(detect.strides.size()) == detect.nl, "ONNX export: ", scope,
                " (Detect) has no strides yet");
  // Anchors are stored in stride units; the graph decodes in pixels.
  std::vector<float> anchors_px = detect.anchors.to(Device::cpu()).to(DType::F32).contiguous().to_vector<float>();
  for (int64_t l = 0; l < detect.nl; ++l)
    for (int64_t k = 0; k < detect.na * 2; ++k)
      anchors_px[l * detect.na * 2 + k] *= static_cast<float>(detect.strides[l]);
  std::vector<std::string> levels;
  for (int64_t l = 0; l < detect.nl; ++l)
    levels.push_back(emit_level(g, detect, l, features[l], anchors_px, scope + ".m." + std::to_string(l)));
  return levels.size() == 1 ? levels[0] : g.node("Concat", levels, scope, {int_attr("axis", 1)});
}

std::vector<std::string> emit_segment(GraphBuilder& g, layers::Segment& segment, const std::vector<std::string>& features,
                                      const std::string& scope) {
  const std::string detections = emit_detect(g, segment, features, scope);
  const layers::Proto& p = *segment.proto;
  std::string x = emit_unary(g, *p.cv1, features[0], scope + ".proto.cv1");
  x = emit_unary(g, *p.upsample, x, scope + ".proto.upsample");
  x = emit_unary(g, *p.cv2, x, scope + ".proto.cv2");
  x = emit_unary(g, *p.cv3, x, scope + ".proto.cv3");
  return {detections, x};
}

}  // namespace kestrel::yolo::onnx_export
