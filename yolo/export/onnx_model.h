// ONNX weights for `kestrel val` and `kestrel detect`, run in OpenCV's DNN module, as the
// reference's DetectMultiBackend runs an .onnx (its --dnn: OpenCV DNN; Kestrel always uses it).
// The graph must be a detector as `kestrel export` or the reference's export.py writes it: input
// (batch, 3, height, width) RGB in [0, 1], first output (batch, boxes, 5 + nc) of decoded xywh,
// objectness and class scores. A -seg model's export (`kestrel segment val` and `segment predict`
// run it, as the reference's segment/val.py and predict.py) has 5 + nc + nm values per box (the
// mask coefficients raw) and a second output (batch, nm, height / 4, width / 4) of prototypes.
// Its metadata_props give the largest stride ('stride') and the class names ('names', Python's
// str() of a dict {0: 'person', ...} or of a list) where present.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo {

class OnnxModel {
 public:
  // Throws naming the file when it is no ONNX graph, or not a detector's.
  explicit OnnxModel(const std::string& path);
  ~OnnxModel();
  OnnxModel(const OnnxModel&) = delete;
  OnnxModel& operator=(const OnnxModel&) = delete;

  const std::string& path() const { return path_; }
  std::optional<int> stride() const { return stride_; }   // from the metadata
  const std::vector<std::string>& names() const { return names_; }  // empty without metadata
  std::optional<int64_t> nc() const { return nc_; }       // 5 + nc (+ nm) outputs, when the shape says
  // A segmentation model's export: a second output of nm prototypes (4 dimensions).
  bool segmentation() const { return nm_ > 0; }
  int64_t nm() const { return nm_; }  // the mask coefficients per box (0: a detector)
  // The input's fixed sizes (nullopt for a dynamic axis).
  std::optional<int64_t> batch() const { return batch_; }
  std::optional<int64_t> height() const { return height_; }
  std::optional<int64_t> width() const { return width_; }
  bool float16_input() const { return float16_; }

  // images: NHWC float32 (batch, h, w, 3) on any device. Returns the decoded boxes (batch, N, no),
  // float32 on the CPU. A graph with a fixed batch runs smaller batches padded with empty images.
  Tensor predict(const Tensor& images);
  // A segmentation export's two outputs for `images` (as predict's): the decoded boxes (batch, N,
  // 5 + nc + nm) and the prototypes NHWC (batch, h / 4, w / 4, nm), as SegmentationModel::predict
  // returns them; float32 on the CPU.
  struct SegmentOutputs {
    Tensor boxes, protos;
  };
  SegmentOutputs predict_segmentation(const Tensor& images);

 private:
  struct Net;
  // The named outputs for `images`, each cut to the batch's n rows.
  std::vector<Tensor> forward(const Tensor& images, const std::vector<std::string>& outputs);

  std::string path_;
  std::unique_ptr<Net> net_;
  std::string input_name_, output_name_, protos_name_;
  std::optional<int> stride_;
  std::vector<std::string> names_;
  std::optional<int64_t> nc_, batch_, height_, width_;
  int64_t nm_ = 0;
  bool float16_ = false;
};

// The class names of a 'names' metadata value: Python's str() of {0: 'a', 1: "b's"} or ['a', 'b'].
// Throws on anything else.
std::vector<std::string> parse_python_names(const std::string& text);

}  // namespace kestrel::yolo
