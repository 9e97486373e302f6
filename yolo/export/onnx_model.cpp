#include "yolo/export/onnx_model.h"

#include <onnx/onnx_pb.h>
#include <opencv2/dnn.hpp>

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace kestrel::yolo {

struct OnnxModel::Net {
  cv::dnn::Net net;
};

namespace {

// A Python string literal at text[i] ('...' or "..."), its escapes decoded; i moves past it.
std::string python_string(const std::string& text, size_t& i) {
  const char quote = text[i++];
  std::string out;
  while (i < text.size() && text[i] != quote) {
    char c = text[i++];
    if (c == '\\' && i < text.size()) {
      const char e = text[i++];
      if (e == 'n') c = '\n';
      else if (e == 't') c = '\t';
      else if (e == 'r') c = '\r';
      else if (e == 'x' && i + 2 <= text.size()) c = static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16)), i += 2;
      else c = e;  // \\, \', \"
    }
    out += c;
  }
  KESTREL_CHECK(i < text.size(), "unterminated string");
  ++i;
  return out;
}

void skip_spaces(const std::string& t, size_t& i) {
  while (i < t.size() && (t[i] == ' ' || t[i] == '\n')) ++i;
}

std::optional<int64_t> fixed_dim(const onnx::TensorShapeProto& shape, int d) {
  if (shape.dim_size() <= d || !shape.dim(d).has_dim_value() || shape.dim(d).dim_value() <= 0) return std::nullopt;
  return shape.dim(d).dim_value();
}

}  // namespace

std::vector<std::string> parse_python_names(const std::string& text) {
  try {
    size_t i = 0;
    skip_spaces(text, i);
    KESTREL_CHECK(i < text.size() && (text[i] == '{' || text[i] == '['), "expected { or [");
    const bool dict = text[i++] == '{';
    const char close = dict ? '}' : ']';
    std::vector<std::string> names;
    for (skip_spaces(text, i); i < text.size() && text[i] != close;) {
      if (dict) {
        size_t used = 0;
        const long key = std::stol(text.substr(i), &used);
        KESTREL_CHECK(key == static_cast<long>(names.size()), "class ", key, " where ", names.size(), " was due");
        i += used;
        skip_spaces(text, i);
        KESTREL_CHECK(i < text.size() && text[i] == ':', "expected ':'");
        ++i;
        skip_spaces(text, i);
      }
      KESTREL_CHECK(i < text.size() && (text[i] == '\'' || text[i] == '"'), "expected a quoted name");
      names.push_back(python_string(text, i));
      skip_spaces(text, i);
      if (i < text.size() && text[i] == ',') ++i;
      skip_spaces(text, i);
    }
    KESTREL_CHECK(i < text.size(), "expected ", close);
    return names;
  } catch (const std::exception& e) {
    KESTREL_FAIL("the class names '", text.substr(0, 80), "' are not Python's text of a dict or list of names (",
                 e.what(), ")");
  }
}

OnnxModel::OnnxModel(const std::string& path) : path_(path), net_(std::make_unique<Net>()) {
  std::ifstream in(path, std::ios::binary);
  KESTREL_CHECK(in, "ONNX weights '", path, "': cannot open it (", std::strerror(errno), ")");
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string data = bytes.str();
  onnx::ModelProto model;
  KESTREL_CHECK(model.ParseFromString(data), "'", path, "' is not a readable ONNX model (cut short or damaged?); "
                "export it again");
  const onnx::GraphProto& g = model.graph();
  // Inputs that are also initializers are weights (older exporters list them); the image is the other.
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& v : g.input()) {
    bool weight = false;
    for (const auto& init : g.initializer()) weight = weight || init.name() == v.name();
    if (!weight) inputs.push_back(&v);
  }
  KESTREL_CHECK(inputs.size() == 1 && g.output_size() >= 1, "'", path, "' has ", inputs.size(), " inputs and ",
                g.output_size(), " outputs; Kestrel runs detectors with one image input, as export.py writes them");
  input_name_ = inputs[0]->name();
  output_name_ = g.output(0).name();
  const auto& in_type = inputs[0]->type().tensor_type();
  const onnx::TensorShapeProto& in_shape = in_type.shape();
  KESTREL_CHECK(in_shape.dim_size() == 4 && (!fixed_dim(in_shape, 1) || *fixed_dim(in_shape, 1) == 3), "'", path,
                "': its input '", input_name_, "' is not (batch, 3, height, width); not a YOLOv5 export");
  batch_ = fixed_dim(in_shape, 0);
  height_ = fixed_dim(in_shape, 2);
  width_ = fixed_dim(in_shape, 3);
  float16_ = in_type.elem_type() == onnx::TensorProto::FLOAT16;
  const onnx::TensorShapeProto& out_shape = g.output(0).type().tensor_type().shape();
  KESTREL_CHECK(out_shape.dim_size() == 3, "'", path, "': its output '", output_name_, "' has ", out_shape.dim_size(),
                " dimensions, not (batch, boxes, 5 + classes); not a YOLOv5 detector's or segmentation model's export "
                "(a classifier?)");
  // A -seg export: output1 holds the prototypes (batch, nm, height / 4, width / 4).
  if (g.output_size() >= 2 && g.output(1).type().tensor_type().shape().dim_size() == 4) {
    protos_name_ = g.output(1).name();
    const std::optional<int64_t> nm = fixed_dim(g.output(1).type().tensor_type().shape(), 1);
    KESTREL_CHECK(nm, "'", path, "': its prototypes output '", protos_name_, "' has no fixed mask count (its second "
                  "axis); not a YOLOv5 segmentation model's export");
    nm_ = *nm;
  }
  if (const auto no = fixed_dim(out_shape, 2)) {
    KESTREL_CHECK(*no > 5 + nm_, "'", path, "': ", *no, " values per box, fewer than 5 + a class", nm_ ? " + " : "",
                  nm_ ? std::to_string(nm_) + " mask coefficients" : std::string());
    nc_ = *no - 5 - nm_;
  }
  for (const auto& p : model.metadata_props()) {
    try {
      if (p.key() == "stride") stride_ = std::stoi(p.value());
    } catch (const std::exception&) {
      KESTREL_FAIL("'", path, "': its metadata 'stride' is '", p.value(), "', not a number");
    }
    if (p.key() == "names") names_ = parse_python_names(p.value());
  }
  KESTREL_CHECK(!nc_ || names_.empty() || static_cast<int64_t>(names_.size()) == *nc_, "'", path, "': ",
                names_.size(), " class names in its metadata for ", *nc_, " classes");
  try {
    net_->net = cv::dnn::readNetFromONNX(data.data(), data.size());
  } catch (const cv::Exception& e) {
    KESTREL_FAIL("OpenCV DNN cannot load '", path, "': ", e.what());
  }
}

OnnxModel::~OnnxModel() = default;

std::vector<Tensor> OnnxModel::forward(const Tensor& images, const std::vector<std::string>& outputs) {
  KESTREL_CHECK(images.dim() == 4 && images.size(3) == 3, "OnnxModel::predict: expects NHWC RGB images, got ",
                images.describe());
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2);
  KESTREL_CHECK(!batch_ || n <= *batch_, "'", path_, "' takes batches of ", batch_.value_or(0), " images, not ", n);
  const int64_t rows = batch_ ? *batch_ : n;
  const Tensor nchw = images.to(Device::cpu()).to(DType::F32).permute({0, 3, 1, 2}).contiguous();
  const int dims[] = {static_cast<int>(rows), 3, static_cast<int>(h), static_cast<int>(w)};
  cv::Mat blob(4, dims, CV_32F, cv::Scalar(0));
  std::memcpy(blob.ptr<float>(), nchw.data_ptr(), static_cast<size_t>(nchw.numel()) * sizeof(float));
  std::vector<cv::Mat> outs;
  try {
    net_->net.setInput(blob, input_name_);
    net_->net.forward(outs, outputs);
  } catch (const cv::Exception& e) {
    KESTREL_FAIL("OpenCV DNN failed to run '", path_, "' on a (", rows, ", 3, ", h, ", ", w, ") input: ", e.what());
  }
  KESTREL_CHECK(outs.size() == outputs.size(), "'", path_, "': OpenCV DNN gave ", outs.size(), " outputs for ",
                outputs.size());
  std::vector<Tensor> result;
  for (size_t k = 0; k < outs.size(); ++k) {
    const cv::Mat& out = outs[k];
    KESTREL_CHECK(out.dims >= 2 && out.size[0] == rows && out.type() == CV_32F && out.isContinuous(), "'", path_,
                  "': its output '", outputs[k], "' is not float32 with the batch's ", rows, " rows");
    Shape shape = {n};
    for (int d = 1; d < out.dims; ++d) shape.push_back(out.size[d]);
    Tensor t = Tensor::empty(shape);
    std::memcpy(t.data_ptr(), out.ptr<float>(), static_cast<size_t>(t.numel()) * sizeof(float));
    result.push_back(std::move(t));
  }
  return result;
}

Tensor OnnxModel::predict(const Tensor& images) {
  Tensor boxes = std::move(forward(images, {output_name_})[0]);
  KESTREL_CHECK(boxes.dim() == 3, "'", path_, "': its output is not (batch, boxes, 5 + classes) float32");
  return boxes;
}

OnnxModel::SegmentOutputs OnnxModel::predict_segmentation(const Tensor& images) {
  KESTREL_CHECK(segmentation(), "'", path_, "' is a detector's export (one output, no mask prototypes); not a "
                "segmentation model's");
  std::vector<Tensor> outs = forward(images, {output_name_, protos_name_});
  KESTREL_CHECK(outs[0].dim() == 3 && outs[0].size(2) > 5 + nm_ && outs[1].dim() == 4 && outs[1].size(1) == nm_, "'",
                path_, "': its outputs are ", outs[0].describe(), " and ", outs[1].describe(), ", not (batch, boxes, 5 + "
                "classes + ", nm_, ") and (batch, ", nm_, ", height / 4, width / 4)");
  // OpenCV's NCHW prototypes as Kestrel's models give them: NHWC (batch, h / 4, w / 4, nm).
  return {std::move(outs[0]), outs[1].permute({0, 2, 3, 1}).contiguous()};
}

}  // namespace kestrel::yolo
