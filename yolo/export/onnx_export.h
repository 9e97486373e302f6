// `kestrel export --include onnx`: a DetectionModel (or a ClassificationModel, below) as an ONNX inference graph, as the reference's
// export.py writes it: input `images` (batch, ch, height, width) NCHW in [0, 1], one output
// `output0` (batch, anchors, 5 + nc) with boxes decoded in pixels (xywh) and sigmoid applied,
// BatchNorm folded into the convolutions, the model's stride and class names as metadata_props
// ('stride', 'names'), dynamic 'batch'/'height'/'width' axes on request. The graph is built with
// the ONNX library's message classes and passes its checker and strict shape inference.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "yolo/model/classification_model.h"
#include "yolo/model/model.h"
#include "yolo/model/segmentation_model.h"

namespace kestrel::yolo {

struct OnnxExportOptions {
  int64_t batch = 1;  // the input shape, fixed unless `dynamic`
  int64_t height = 640, width = 640;
  bool dynamic = false;  // 'batch', 'height', 'width' input axes; 'batch', 'anchors' output axes
  bool half = false;     // float16 input, weights and output
  int opset = 12;        // the reference's default
  std::vector<std::string> names;  // class names; empty: "0", "1", ... as the reference's default
};

// The graph for `model` (any device; read, never changed). Throws when the options cannot be
// met (sizes not multiples of the largest stride, --half with --dynamic, an opset the ONNX
// library does not know) or a module has no ONNX form.
onnx::ModelProto build_onnx_model(const DetectionModel& model, const OnnxExportOptions& options);

// A classifier's graph: the same input, one output `output0` (batch, nc) of logits (no softmax, as
// the reference's export of a ClassificationModel), Classify as Conv, GlobalAveragePool, Flatten
// and Gemm; metadata 'stride' 32 (the detector's it was cut from) and 'names'.
inline constexpr int64_t kClassifierStride = 32;
onnx::ModelProto build_onnx_model(const ClassificationModel& model, const OnnxExportOptions& options);

// A -seg model's graph, as the reference's export of a SegmentationModel: output0 (batch, anchors,
// 5 + nc + 32), boxes decoded as Detect's and the mask coefficients raw, and output1 the
// prototypes (batch, 32, height / 4, width / 4).
onnx::ModelProto build_onnx_model(const SegmentationModel& model, const OnnxExportOptions& options);

// Runs onnx::checker::check_model and strict shape inference; throws naming what they found.
void check_onnx_model(const onnx::ModelProto& model);

// Serialises `model` to `path` atomically.
void save_onnx_model(const onnx::ModelProto& model, const std::string& path);

// The output's shape for fixed sizes: (batch, na · Σ (height/stride)(width/stride), 5 + nc).
std::vector<int64_t> onnx_output_shape(const DetectionModel& model, const OnnxExportOptions& options);

// The newest opset the linked ONNX library knows.
int max_onnx_opset();

// The metadata's 'names' value as the reference writes it: Python's str() of {0: 'person', ...}.
std::string python_names_dict(const std::vector<std::string>& names);

}  // namespace kestrel::yolo
