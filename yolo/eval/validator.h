// Validation as the reference's val.py run(): rectangular letterboxed batches, the model in eval
// mode, NMS (multi-label), boxes mapped back to the original images, the correct-matrix at 10 IoU
// thresholds, ap_per_class, the printed table and speed line. `kestrel val` and the trainer's
// per-epoch validation (on the EMA model) both call it. A run is three phases (validator.cpp):
// predict (upload, model, loss, NMS, timed per batch), match (each image's detections against its
// labels in original pixels, into the statistics; txt and json rows), report (metrics, table,
// plots, predictions.json).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yolo/common/console.h"
#include "yolo/data/loader.h"
#include "yolo/eval/metrics.h"
#include "yolo/model/model.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {

struct ValOptions {
  int img_size = 640;
  int batch_size = 32;
  double conf_thres = 0.001;
  double iou_thres = 0.6;
  int64_t max_det = 300;
  bool single_cls = false;
  DType compute_dtype = DType::F32;  // bf16 / fp16 for --half on CUDA
  bool augment = false;       // --augment: test-time augmentation (yolo/eval/augmented_inference.h)
  bool rect = true;           // rectangular batches (the reference: for PyTorch weights only)
  int workers = 8;
  bool verbose = false;       // per-class rows
  // Called by the trainer (the reference's `training`): no per-class rows unless verbose, no
  // speed line. Outside training, per-class rows below 50 classes.
  bool training = false;
  // In training, --cache for the val loader too ("", "ram", "disk"), as the reference's; what it
  // did is cache_line() (data::cache_dataset_images).
  std::string cache;
  std::string save_dir;       // where plots / json / txt go ("" = nowhere)
  bool plots = false;         // val_batch0_labels/pred.jpg, confusion matrix, PR curve
  bool save_json = false;     // COCO-format detections (predictions.json)
  bool save_txt = false;      // labels/<image>.txt per image (class x y w h, normalised)
  bool save_conf = false;     // ... with each box's confidence as a sixth column
  bool coco_ids = false;      // map classes to the 91 COCO category ids in the json
  // With save_json: COCO's official metric on the detections (yolo/eval/coco_eval.h), as the
  // reference's pycocotools step: its 12 summary lines end the table, and its AP@[.5:.95] and AP50
  // replace mAP50-95 and mAP50. Against the file `coco_gt` when set (on the split's images only),
  // else, with `coco_eval`, against a ground truth made from the split's labels. A ground truth
  // that cannot be read leaves a warning line and the metrics as they were; no detections, no
  // evaluation (as the reference).
  std::string coco_gt;
  bool coco_eval = false;
};

// The validation losses of one batch, from the model's raw outputs and the batch's targets (the
// reference's compute_loss(train_out, targets)[1]). The trainer passes its loss through this, so
// evaluation knows no training code; each task's loss fills the items its results.csv has.
struct ValLossItems {
  double box = 0, obj = 0, cls = 0;
};
using ValLoss = std::function<ValLossItems(const std::vector<Tensor>& raw, const Tensor& targets)>;

// Ground-truth boxes of a batch from its targets tensor [M, 6] (image, class, x, y, w, h
// normalised) for plot_batch: the label boxes validation matches against (label_boxes).
std::vector<PlotBox> target_boxes(const Tensor& targets, int64_t height, int64_t width);

struct ValResult {
  ValMetrics metrics;
  double box_loss = 0, obj_loss = 0, cls_loss = 0;  // mean over batches (when a loss was given)
  double ms_pre = 0, ms_inf = 0, ms_nms = 0;        // per image
  int64_t images = 0, instances = 0;
  // The printed table and speed line. Where a console showed the progress line, that line
  // carried the header (as the reference's tqdm description) and the table starts at "all".
  std::string table;
};

class Validator {
 public:
  Validator(std::vector<data::ImageRecord> records, std::vector<std::string> names, int nc,
            const ValOptions& options, Device device, int stride);
  // Runs the model (switched to eval for the duration, gradients off) over the split. `loss`
  // (optional) adds the validation losses, as during training.
  ValResult run(DetectionModel& model, const ValLoss& loss = nullptr);
  // The same over any predictor: NHWC input in the compute dtype -> decoded boxes (batch, N, no)
  // (ONNX weights in OpenCV DNN). No losses.
  using BoxPredictor = std::function<Tensor(const Tensor& images)>;
  ValResult run(const BoxPredictor& predict);
  int64_t size() const { return pipeline_->size(); }
  void set_plots(bool on) { options_.plots = on; }
  void set_verbose(bool on) { options_.verbose = on; }
  // COCO's own evaluation of the next runs' detections against `gt` (train.py's final validation
  // on COCO, save_json=is_coco): predictions.json with COCO's category ids, and the 12 lines.
  void set_coco_eval(const std::string& gt) {
    options_.save_json = true;
    options_.coco_ids = true;
    options_.coco_gt = gt;
  }
  // A progress line per batch on this console (nullptr: none). Not owned; must outlive run().
  void set_console(const Console* console) { console_ = console; }
  const std::string& cache_line() const { return cache_line_; }

 private:
  ValResult run_batches(const std::function<DetectionModel::Prediction(const Tensor&)>& model, const ValLoss& loss);

  std::vector<std::string> names_;
  int nc_;
  ValOptions options_;
  const Console* console_ = nullptr;
  Device device_;
  std::shared_ptr<const data::AugmentPipeline> pipeline_;
  std::string cache_line_;
  std::unique_ptr<data::Loader> loader_;
};

// The 80 -> 91 COCO category id mapping (coco80_to_coco91_class in the reference).
const std::vector<int>& coco80_to_91();

}  // namespace kestrel::yolo
