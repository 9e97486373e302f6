// Instance-segmentation validation as the reference's segment/val.py run(): rectangular
// letterboxed batches with their label masks, the model in eval mode, NMS carrying the 32 mask
// coefficients, each detection's mask from the prototypes (process_mask on the prototype grid;
// process_mask_upsample at the input size with --save-json, as the reference), boxes and masks
// matched against the labels at 10 IoU thresholds, the box-and-mask metrics and table, plots,
// labels/*.txt and predictions.json with RLE masks. `kestrel segment val` and the segmentation
// trainer's per-epoch validation both call it. With save_json and coco_eval / coco_gt (validator.h's
// ValOptions), COCO's own bbox and segm evaluation of the json (yolo/eval/coco_eval.h), as the
// reference's pycocotools step: both summaries end the table, and their AP@[.5:.95] and AP50
// replace the box and mask mAP50-95 and mAP50.
//
// Label masks come from the loader: standalone (the reference's defaults) one full-size mask per
// label (overlap off, mask ratio 1), bilinearly resized to the predicted masks' grid and
// thresholded; in training, the trainer's --overlap-mask and --mask-ratio.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yolo/common/console.h"
#include "yolo/data/seg_loader.h"
#include "yolo/eval/seg_metrics.h"
#include "yolo/eval/validator.h"
#include "yolo/model/segmentation_model.h"

namespace kestrel::yolo {

struct SegValOptions : ValOptions {
  bool overlap = false;  // the loader's masks: one index image per image (--overlap-mask)
  int mask_ratio = 1;    // label masks at 1 / mask_ratio of the input (--mask-ratio)
};

// The validation losses of one batch (the reference's compute_loss(...)[1]: box, seg, obj, cls).
struct SegValLossItems {
  double box = 0, seg = 0, obj = 0, cls = 0;
};
using SegValLoss = std::function<SegValLossItems(const std::vector<Tensor>& raw, const Tensor& protos,
                                                 const Tensor& targets, const Tensor& masks)>;

struct SegValResult {
  SegValMetrics metrics;
  double box_loss = 0, seg_loss = 0, obj_loss = 0, cls_loss = 0;  // means over batches (with a loss)
  double ms_pre = 0, ms_inf = 0, ms_nms = 0;                      // per image
  int64_t images = 0, instances = 0;
  std::string table;  // as validator.h's ValResult::table
};

class SegValidator {
 public:
  SegValidator(std::vector<data::ImageRecord> records, std::vector<std::string> names, int nc,
               const SegValOptions& options, Device device, int stride);
  // Runs the model (switched to eval for the duration, gradients off) over the split; `loss`
  // (optional) adds the validation losses, as during training.
  SegValResult run(SegmentationModel& model, const SegValLoss& loss = nullptr);
  // The same over any predictor: NHWC input in the compute dtype -> decoded boxes (batch, N,
  // 5 + nc + nm) and prototypes NHWC (batch, h / 4, w / 4, nm), as SegmentationModel::predict
  // gives them (ONNX weights in OpenCV DNN; `raw` unused). No losses.
  using SegPredictor = std::function<SegmentationModel::Prediction(const Tensor& images)>;
  SegValResult run(const SegPredictor& predict);
  int64_t size() const { return pipeline_->size(); }
  void set_plots(bool on) { options_.plots = on; }
  void set_verbose(bool on) { options_.verbose = on; }
  // COCO's own bbox and segm evaluation of the next runs' detections against `gt`
  // (segment/train.py's final validation on COCO, save_json=is_coco).
  void set_coco_eval(const std::string& gt) {
    options_.save_json = true;
    options_.coco_ids = true;
    options_.coco_gt = gt;
  }
  // A progress line per batch on this console (nullptr: none). Not owned; must outlive run().
  void set_console(const Console* console) { console_ = console; }
  const std::string& cache_line() const { return cache_line_; }  // as Validator's

 private:
  SegValResult run_batches(const SegPredictor& predict, const SegValLoss& loss);

  std::vector<std::string> names_;
  int nc_;
  SegValOptions options_;
  const Console* console_ = nullptr;
  Device device_;
  std::shared_ptr<const data::SegAugmentPipeline> pipeline_;
  std::string cache_line_;
  std::unique_ptr<data::SegLoader> loader_;
};

}  // namespace kestrel::yolo
