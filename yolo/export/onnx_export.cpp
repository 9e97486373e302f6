#include "yolo/export/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstdio>

#include "engine/autograd.h"
#include "io/atomic_file.h"
#include "yolo/export/onnx_classify.h"
#include "yolo/export/onnx_detect.h"
#include "yolo/export/onnx_layers.h"

namespace kestrel::yolo {
namespace {

// The oldest IR version that carries each opset (the ONNX versioning table), so that older
// runtimes read the file.
int64_t ir_version_for(int opset) { return opset <= 14 ? 7 : 8; }

// A graph input or output: its name, element type and dims (a non-empty param names a dynamic one).
void describe(onnx::ValueInfoProto* v, const std::string& name, int32_t elem_type, const std::vector<int64_t>& dims,
              const std::vector<std::string>& params) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  for (size_t i = 0; i < dims.size(); ++i) {
    auto* d = t->mutable_shape()->add_dim();
    if (!params[i].empty()) d->set_dim_param(params[i]);
    else d->set_dim_value(dims[i]);
  }
}

std::string python_str(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char ch : s) {
    if (ch == '\\' || ch == quote) out += '\\', out += static_cast<char>(ch);
    else if (ch == '\n') out += "\\n";
    else if (ch == '\r') out += "\\r";
    else if (ch == '\t') out += "\\t";
    else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + quote;
}

int64_t largest_stride(const DetectionModel& model) {
  return static_cast<int64_t>(*std::max_element(model.strides().begin(), model.strides().end()));
}

}  // namespace

int max_onnx_opset() {
  return onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(onnx::ONNX_DOMAIN).second;
}

std::string python_names_dict(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + std::to_string(i) + ": " + python_str(names[i]);
  return out + "}";
}

std::vector<int64_t> onnx_output_shape(const DetectionModel& model, const OnnxExportOptions& o) {
  const layers::Detect& d = model.detect();
  int64_t anchors = 0;
  for (double s : d.strides) {
    const auto stride = static_cast<int64_t>(s);
    anchors += d.na * (o.height / stride) * (o.width / stride);
  }
  return {o.batch, anchors, d.no};
}

namespace {

// The graph of a model built from rows: the input, every row but the head as
// DetectionModel::forward runs them (-1 on the first row is the input), the head by `emit_head`
// (returning its output's name), the output `output0` of `output_dims`, and the metadata.
// A graph output: its dims, and the names of its dynamic axes ("" for a fixed one).
struct GraphOutput {
  std::vector<int64_t> dims;
  std::vector<std::string> params;
};

template <class EmitHead>
onnx::ModelProto build_rows_graph(const std::string& name, const ModelConfig& config,
                                  const std::vector<ModelLayer>& layers, const OnnxExportOptions& o,
                                  const std::vector<GraphOutput>& outputs_described, int64_t stride,
                                  std::vector<std::string> names, int64_t nc, EmitHead emit_head) {
  autograd::NoGradGuard no_grad;
  const int32_t float_type = o.half ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
  onnx::ModelProto m;
  m.set_ir_version(ir_version_for(o.opset));
  m.set_producer_name("kestrel");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(o.opset);
  onnx::GraphProto* graph = m.mutable_graph();
  graph->set_name(name.empty() ? "main_graph" : name);

  const std::string input = "images";
  describe(graph->add_input(), input, float_type, {o.batch, config.input_channels, o.height, o.width},
           o.dynamic ? std::vector<std::string>{"batch", "", "height", "width"} : std::vector<std::string>(4));
  onnx_export::GraphBuilder g(graph, float_type);
  std::vector<std::string> outputs(layers.size());
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    const std::string scope = "model." + std::to_string(i);
    std::vector<std::string> ins;
    for (int f : layers[i].from) ins.push_back(f < 0 ? input : outputs[f]);
    layers::Module& module = *layers[i].module;
    if (dynamic_cast<layers::Concat*>(&module)) {
      outputs[i] = onnx_export::emit_concat(g, ins, scope);
    } else {
      KESTREL_CHECK(ins.size() == 1, "ONNX export: ", scope, " (", module.type_name(), ") takes one input, got ",
                    ins.size());
      outputs[i] = onnx_export::emit_unary(g, module, ins[0], scope);
    }
  }
  const size_t head = layers.size() - 1;
  std::vector<std::string> ins;
  for (int f : layers[head].from) ins.push_back(f < 0 ? input : outputs[f]);
  // The head's outputs (Detect: one; Segment: the detections and the prototypes) as output0, 1, ...
  const std::vector<std::string> heads = emit_head(g, *layers[head].module, ins, "model." + std::to_string(head));
  KESTREL_CHECK(heads.size() == outputs_described.size(), "ONNX export: the head made ", heads.size(), " outputs, not ",
                outputs_described.size());
  for (size_t k = 0; k < heads.size(); ++k) {
    const std::string output = "output" + std::to_string(k);
    g.rename_output(heads[k], output);
    const GraphOutput& d = outputs_described[k];
    describe(graph->add_output(), output, float_type, d.dims, o.dynamic ? d.params : std::vector<std::string>(d.dims.size()));
  }

  for (int64_t c = static_cast<int64_t>(names.size()); c < nc; ++c) names.push_back(std::to_string(c));
  auto add_metadata = [&](const std::string& key, const std::string& value) {
    auto* p = m.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  };
  add_metadata("stride", std::to_string(stride));
  add_metadata("names", python_names_dict(names));
  check_onnx_model(m);
  return m;
}

void check_common_options(const OnnxExportOptions& o, int64_t gs, int64_t nc) {
  KESTREL_CHECK(o.batch >= 1, "ONNX export: batch size ", o.batch, " must be at least 1");
  KESTREL_CHECK(o.height > 0 && o.width > 0 && o.height % gs == 0 && o.width % gs == 0, "ONNX export: image size ",
                o.height, "x", o.width, " must be a positive multiple of the model's largest stride ", gs);
  KESTREL_CHECK(o.opset >= 12 && o.opset <= max_onnx_opset(), "ONNX export: opset ", o.opset,
                " is not available; use 12 to ", max_onnx_opset(), " (the linked ONNX library's newest)");
  KESTREL_CHECK(!(o.half && o.dynamic), "ONNX export: --half and --dynamic do not go together (as in the ",
                "reference); use one of them");
  KESTREL_CHECK(o.names.empty() || static_cast<int64_t>(o.names.size()) == nc, "ONNX export: ", o.names.size(),
                " class names for a model of ", nc, " classes");
}

}  // namespace

onnx::ModelProto build_onnx_model(const DetectionModel& model, const OnnxExportOptions& o) {
  check_common_options(o, largest_stride(model), model.detect().nc);
  return build_rows_graph(model.config().name, model.config(), model.layers(), o,
                          {{onnx_output_shape(model, o), {"batch", "anchors", ""}}}, largest_stride(model), o.names,
                          model.detect().nc,
                          [](onnx_export::GraphBuilder& g, layers::Module& module, const std::vector<std::string>& ins,
                             const std::string& scope) {
                            auto* detect = dynamic_cast<layers::Detect*>(&module);
                            KESTREL_CHECK(detect, "ONNX export: the model has no Detect layer");
                            return std::vector<std::string>{onnx_export::emit_detect(g, *detect, ins, scope)};
                          });
}

onnx::ModelProto build_onnx_model(const ClassificationModel& model, const OnnxExportOptions& o) {
  check_common_options(o, kClassifierStride, model.nc());
  return build_rows_graph("", model.config(), model.layers(), o, {{{o.batch, model.nc()}, {"batch", ""}}},
                          kClassifierStride, o.names, model.nc(),
                          [](onnx_export::GraphBuilder& g, layers::Module& module, const std::vector<std::string>& ins,
                             const std::string& scope) {
                            auto* head = dynamic_cast<layers::Classify*>(&module);
                            KESTREL_CHECK(head, "ONNX export: the classifier's last layer is not Classify");
                            return std::vector<std::string>{onnx_export::emit_classify(g, *head, ins, scope)};
                          });
}

onnx::ModelProto build_onnx_model(const SegmentationModel& model, const OnnxExportOptions& o) {
  const layers::Segment& segment = model.segment();
  const int64_t gs = static_cast<int64_t>(*std::max_element(segment.strides.begin(), segment.strides.end()));
  check_common_options(o, gs, model.nc());
  int64_t anchors = 0;
  for (double st : segment.strides)
    anchors += segment.na * (o.height / static_cast<int64_t>(st)) * (o.width / static_cast<int64_t>(st));
  const int64_t s0 = static_cast<int64_t>(segment.strides[0]);
  const std::vector<GraphOutput> outputs = {
      {{o.batch, anchors, segment.no}, {"batch", "anchors", ""}},
      {{o.batch, segment.nm, 2 * (o.height / s0), 2 * (o.width / s0)}, {"batch", "", "height", "width"}}};
  return build_rows_graph(model.config().name, model.config(), model.layers(), o, outputs, gs, o.names, model.nc(),
                          [](onnx_export::GraphBuilder& g, layers::Module& module, const std::vector<std::string>& ins,
                             const std::string& scope) {
                            auto* head = dynamic_cast<layers::Segment*>(&module);
                            KESTREL_CHECK(head, "ONNX export: the segmentation model's last layer is not Segment");
                            return onnx_export::emit_segment(g, *head, ins, scope);
                          });
}

void check_onnx_model(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
    onnx::ModelProto inferred = model;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict_mode=*/1));
  } catch (const std::exception& e) {
    KESTREL_FAIL("ONNX export: the graph fails ONNX's own checks (a Kestrel bug; please report it): ", e.what());
  }
}

void save_onnx_model(const onnx::ModelProto& model, const std::string& path) {
  std::string bytes;
  KESTREL_CHECK(model.SerializeToString(&bytes), "ONNX export: could not serialise the model for ", path,
                " (protobuf files are limited to 2 GiB)");
  write_file_atomic(path, bytes);
}

}  // namespace kestrel::yolo
