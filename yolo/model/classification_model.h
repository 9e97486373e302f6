// ClassificationModel: the reference's YOLOv5 classifier (models/yolo.py ClassificationModel), a
// detection backbone cut at a layer with a Classify head (layers/classify.h) in that layer's place.
// v7.0 builds its -cls models as ClassificationModel(model=DetectionModel(yaml), cutoff=10); here a
// classifier is rows of the yaml format ending with one `Classify [nc]` row (classifier_config()
// makes them from a detection yaml), so a classifier's weights carry their model as a yaml like a
// detector's (model_config_yaml).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/classify.h"
#include "yolo/model/model_config.h"
#include "yolo/model/model_rows.h"

namespace kestrel::yolo {

// The reference's default --cutoff: the backbone of every YOLOv5 detection yaml is layers 0-9.
inline constexpr int kDefaultCutoff = 10;

// The rows of ClassificationModel(model=DetectionModel(detection), nc, cutoff): rows [0, cutoff - 1)
// of the detector, then Classify(nc) in place of row cutoff - 1, reading that row's input (the
// reference replaces the last kept layer, taking its input channels). Throws, naming the yaml,
// when cutoff is outside [2, rows] or the detector has no rows to cut.
ModelConfig classifier_config(const ModelConfig& detection, int nc, int cutoff = kDefaultCutoff);

// True when the config's head is Classify (a classifier's yaml), false for Detect.
bool is_classifier_config(const ModelConfig& config);

class ClassificationModel : public layers::Module {
 public:
  // config ends with its Classify row (classifier_config, or a classifier's own yaml). seed drives
  // the weight initialisation (the layers' PyTorch defaults); norm, when given, is every
  // BatchNorm2d's normalisation (SyncBN).
  explicit ClassificationModel(const ModelConfig& config, uint64_t seed = 0,
                               const layers::BatchNorm2d::NormFn& norm = {});
  std::string type_name() const override { return "models.yolo.ClassificationModel"; }

  // NHWC float images (batch, h, w, ch) -> logits (batch, nc).
  Tensor forward(const Tensor& x);

  int nc() const { return config_.nc; }
  const ModelConfig& config() const { return config_; }
  layers::Classify& head() { return *head_; }
  const std::vector<ModelLayer>& layers() const { return layers_; }
  const std::vector<LayerInfo>& layer_table() const { return table_; }

  // The reference's reshape_classifier_output: a new Linear for `nc` classes (freshly initialised
  // from `seed`) when the head predicts another count; the config follows.
  void set_classes(int nc, uint64_t seed);

  // The reference's count of modules (len(list(model.modules()))): each Conv block's SiLU is one
  // shared object, counted once, but a model whose backbone was unpickled (a .pt, or a detector cut
  // into a classifier) has two: the file's, and the one the new Classify head's Conv takes.
  int64_t layer_count() const;
  // Counts that second SiLU: weights read from a file (load_classifier_*), as the reference's
  // models read from a .pt.
  void set_loaded_from_file(bool loaded) { loaded_from_file_ = loaded; }
  // thop's count of one 32x32 image (the reference profiles at the detector's largest stride, 32),
  // scaled to img_size²: convolutions, 4 per BatchNorm output (2 without thop's affine double),
  // the head's Linear and average pool.
  double summary_gflops(int64_t img_size, bool fused);
  // "Model summary: <L> layers, <P> parameters, <G> gradients, <F> GFLOPs": the reference's
  // model_info line, named "Model" as the reference names a ClassificationModel (it has no yaml).
  std::string summary(int64_t img_size, bool fused = false);
  // The table and the summary line, as `kestrel model` prints them.
  std::string describe(int64_t img_size);

 private:
  ModelConfig config_;
  std::shared_ptr<LayerSequence> container_;
  std::vector<ModelLayer> layers_;
  std::vector<bool> saved_;
  std::vector<LayerInfo> table_;
  std::shared_ptr<layers::Classify> head_;
  bool loaded_from_file_ = false;
};

}  // namespace kestrel::yolo
