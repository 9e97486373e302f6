// SegmentationModel: YOLOv5 v7.0's instance-segmentation model (models/yolo.py SegmentationModel,
// a DetectionModel whose last row is Segment), built from a -seg yaml (models/yolov5s-seg.yaml)
// through the same rows as DetectionModel (yolo/model/model_rows.h): layers wired by their `from`
// indices, Segment last (layers/segment.h: Detect with mask coefficients, and Proto on the P3
// input), strides found by a forward pass, anchors in stride units, the Detect part's bias priors.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "layers/segment.h"
#include "yolo/model/model_config.h"
#include "yolo/model/model_rows.h"

namespace kestrel::yolo {

// True when the config's head is Segment (a -seg yaml).
bool is_segmentation_config(const ModelConfig& config);

class SegmentationModel : public layers::Module {
 public:
  // nc overrides the yaml's class count when given. seed drives the weight initialisation. norm,
  // when given, is every BatchNorm2d's normalisation (SyncBN), set after the stride pass.
  SegmentationModel(const ModelConfig& config, std::optional<int> nc = std::nullopt, uint64_t seed = 0,
                    const layers::BatchNorm2d::NormFn& norm = {});
  std::string type_name() const override { return "models.yolo.SegmentationModel"; }

  // x: NHWC float images (batch, h, w, ch). Raw outputs per level, (bs, na, ny, nx, 5 + nc + nm),
  // and the prototypes, NHWC (bs, h/4, w/4, nm): the reference's training-mode (x, p).
  using Output = layers::Segment::Output;
  Output forward(const Tensor& x);
  // The reference's eval-mode (x[0], p, x[1]): decoded detections (bs, N, 5 + nc + nm) with xywh
  // in pixels, confidence and classes as probabilities and the mask coefficients raw; the
  // prototypes; the raw outputs.
  struct Prediction {
    Tensor boxes;
    Tensor protos;
    std::vector<Tensor> raw;
  };
  Prediction predict(const Tensor& x);
  // The output shape of every layer for input x (Segment: its first level's), NHWC.
  std::vector<Shape> layer_output_shapes(const Tensor& x);

  const ModelConfig& config() const { return config_; }
  int nc() const { return config_.nc; }
  layers::Segment& segment() { return *segment_; }
  const layers::Segment& segment() const { return *segment_; }
  const std::vector<double>& strides() const { return segment_->strides; }
  const std::vector<LayerInfo>& layer_table() const { return table_; }
  const std::vector<ModelLayer>& layers() const { return layers_; }

  // The reference's count of modules (len(list(model.modules())), Conv's shared SiLU once).
  int64_t layer_count() const;
  // thop's count as the reference profiles its model (DetectionModel::summary_gflops), with the
  // Proto's upsample (1 per element) too.
  double summary_gflops(int64_t img_size, bool fused);
  // "YOLOv5s-seg summary: <L> layers, <P> parameters, <G> gradients, <F> GFLOPs", the reference's
  // model_info line; `fused` as after its fuse().
  std::string summary(int64_t img_size, bool fused = false);
  // The table and the summary line, as `kestrel model` prints them.
  std::string describe(int64_t img_size);

 private:
  BuiltRow build_segment(const RowBuild& r);  // the Segment row: the model's head, once
  Output run(const Tensor& x, std::vector<Shape>* shapes = nullptr);

  ModelConfig config_;
  std::shared_ptr<LayerSequence> container_;  // "model": holds the layers, for state-dict names
  std::vector<ModelLayer> layers_;
  std::vector<bool> saved_;
  std::vector<LayerInfo> table_;
  std::shared_ptr<layers::Segment> segment_;
};

}  // namespace kestrel::yolo
