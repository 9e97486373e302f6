// DetectionModel: a YOLOv5 model built from a ModelConfig (the reference's parse_model and
// DetectionModel): layers wired by their `from` indices, Detect last, strides found by a forward
// pass, anchors in stride units, the reference's initialisation.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "layers/blocks.h"
#include "layers/detect.h"
#include "yolo/model/model_config.h"
#include "yolo/model/model_rows.h"

namespace kestrel::yolo {

struct RowBuild;  // a yaml row being built (model.cpp)
struct BuiltRow;

class DetectionModel : public layers::Module {
 public:
  // nc overrides the yaml's class count when given. seed drives the weight initialisation. norm,
  // when given, is every BatchNorm2d's normalisation (SyncBN for data-parallel training), set
  // after the stride pass, so building runs no collective.
  DetectionModel(const ModelConfig& config, std::optional<int> nc = std::nullopt,
                 uint64_t seed = 0, const layers::BatchNorm2d::NormFn& norm = {});
  std::string type_name() const override { return "models.yolo.DetectionModel"; }

  // x: NHWC float images (batch, h, w, ch). Raw Detect outputs per level, (bs, na, ny, nx, no).
  std::vector<Tensor> forward(const Tensor& x);
  // Decoded detections (bs, N, no) with xywh in pixels, plus the raw outputs.
  struct Prediction {
    Tensor boxes;
    std::vector<Tensor> raw;
  };
  Prediction predict(const Tensor& x);
  // The same, handing every layer's output but Detect's to `observe` as it is made (index, the
  // layer's module, NHWC output): detect --visualize.
  using LayerObserver = yolo::LayerObserver;
  Prediction predict(const Tensor& x, const LayerObserver& observe);
  // The output shape of every layer for input x (Detect: its first level's), NHWC.
  std::vector<Shape> layer_output_shapes(const Tensor& x);

  const ModelConfig& config() const { return config_; }
  layers::Detect& detect() { return *detect_; }
  const layers::Detect& detect() const { return *detect_; }
  const std::vector<double>& strides() const { return detect_->strides; }
  const std::vector<LayerInfo>& layer_table() const { return table_; }

  // The yaml's rows as built: each layer's module and the absolute indices of its inputs (the
  // previous layer's index for -1). The ONNX export walks this list as forward() does.
  using Layer = ModelLayer;
  const std::vector<Layer>& layers() const { return layers_; }

  // The reference's count of modules (len(list(model.modules()))), parameters, and the GFLOPs of
  // one image of img_size x img_size (2 x multiply-accumulates of the convolutions).
  int64_t layer_count() const;
  double gflops(int64_t img_size);
  // "<name> summary: <L> layers, <P> parameters, <G> gradients, <F> GFLOPs", the reference's
  // model_info line. Its GFLOPs are thop's count (summary_gflops), not gflops() above. `fused`:
  // as the model reads after the reference's fuse() (each Conv block's BatchNorm folded into its
  // convolution, which gains a bias; the fused copies carry no gradients), the line val, detect
  // and export print after "Fusing layers... ".
  std::string summary(int64_t img_size, bool fused = false);
  // thop's count, as the reference profiles its model: the convolutions' multiply-accumulates, 4
  // operations per BatchNorm output element (2, doubled for the affine pair), 1 per upsampled
  // element; of one stride-sized image, doubled and scaled to img_size². Without the BatchNorms
  // when `fused`.
  double summary_gflops(int64_t img_size, bool fused);
  // The table and the summary line, as `kestrel model` prints them.
  std::string describe(int64_t img_size);

 private:
  void build(Generator& gen);
  BuiltRow build_detect(const RowBuild& r);  // the Detect row: the model's head, once
  std::vector<Tensor> run(const Tensor& x, std::vector<Shape>* shapes = nullptr,
                          const LayerObserver* observe = nullptr);

  ModelConfig config_;
  std::shared_ptr<layers::Module> container_;  // "model": holds the layers, for state-dict names
  std::vector<Layer> layers_;
  std::vector<bool> saved_;  // outputs a later layer reads
  std::shared_ptr<layers::Detect> detect_;
  std::vector<LayerInfo> table_;
};

// Python's round(): halves to even, as the reference's depth gain uses.
int64_t round_half_even(double x);
// The reference's make_divisible(x, 8): the next multiple of the divisor at or above x.
int64_t make_divisible(double x, int64_t divisor);

}  // namespace kestrel::yolo
