// What a task brings to detection's Trainer (yolo/train/trainer_run.h), which runs detection
// (`kestrel train`, train.py) and instance segmentation (`kestrel segment train`,
// segment/train.py) alike: the options, run directory, resume, signals, DDP, optimizer, schedule,
// EMA, the step and checkpoints are the trainer's; a task says which model it builds, how a batch
// is loaded, what the step computes (StepObjective), how the EMA is validated and what results.csv
// and the console name. The model is the task's own type inside; the trainer sees layers::Module
// and the Detect head (Segment is one).
//
//   trainer                      task
//   build_model / build_ema      make_model, make_ema_model, describe
//   build_train_loader           make_pipeline (caching stays the trainer's), make_loader
//   build_loss / build_step      build_loss, target_check, objective
//   build_validator / end_epoch  build_validator, validate, results columns
//   train_epoch / train_batch    start_epoch, next, plot_batch, loss names
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/conv.h"
#include "layers/detect.h"
#include "yolo/common/console.h"
#include "yolo/data/loader.h"
#include "yolo/eval/validator.h"
#include "yolo/model/model_config.h"
#include "yolo/train/loss.h"
#include "yolo/train/train_options.h"
#include "yolo/train/train_step.h"
#include "yolo/train/trainer.h"

namespace kestrel::yolo {

// One training batch: detection's Batch, and segmentation's label masks (host; undefined for
// detection), which the trainer uploads beside the targets.
struct TaskBatch {
  data::Batch batch;
  Tensor masks;
};

// One validation of the EMA as the trainer records it.
struct TaskValidation {
  std::vector<double> metrics;  // results.csv's columns between the train losses and the lrs
  double fitness = 0;           // train.py's fitness, or segmentation's seg_fitness
  std::vector<double> maps;     // per class mAP50-95 (--image-weights)
  std::string table;            // the console's table
  TrainResults results;         // what train() hands back (detection's; --evolve)
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;

  // The console's loss columns and results.csv's (without "epoch") at its cell width.
  virtual const std::vector<std::string>& loss_names() const = 0;
  virtual const std::vector<std::string>& results_columns() const = 0;
  virtual int results_width() const = 0;
  // The dataset's labels with polygons (segmentation's masks are drawn from them).
  virtual bool polygons() const = 0;
  // Why CUDA graphs cannot capture this task's step ("" when they can).
  virtual std::string graph_obstacle() const = 0;

  // The model, its EMA twin (same architecture, no SyncBN) and the reference's description.
  virtual std::shared_ptr<layers::Module> make_model(const ModelConfig& config, int nc, uint64_t seed,
                                                     const layers::BatchNorm2d::NormFn& norm) = 0;
  virtual std::shared_ptr<layers::Module> make_ema_model(const ModelConfig& config, int nc, uint64_t seed) = 0;
  virtual layers::Detect& head() = 0;  // make_model's
  virtual std::string describe(int img_size) = 0;
  virtual std::string ema_summary(int img_size, bool fused) = 0;

  // The train loader: the pipeline's images (the trainer caches them), then the loader over it;
  // returns the batches per epoch.
  virtual data::AugmentPipeline& make_pipeline(const std::vector<data::ImageRecord>& records,
                                               const data::PipelineOptions& options) = 0;
  virtual int64_t make_loader(const data::LoaderOptions& options, data::EpochOrder order) = 0;
  virtual void start_epoch(int64_t epoch, int64_t first_batch) = 0;
  virtual std::optional<TaskBatch> next() = 0;
  // train_batch<ni>.jpg (the reference's plot_images, or plot_images_and_masks).
  virtual void plot_batch(const TaskBatch& batch, const std::string& path) = 0;

  // The loss from the head's anchors (final by now) and the scaled hyperparameters; the target
  // checks BatchPrep makes; the step's objective over make_model's model.
  virtual void build_loss(const Hyp& scaled) = 0;
  virtual const ComputeLoss& target_check() const = 0;
  virtual const StepObjective& objective() const = 0;

  // Rank 0's validator of the EMA model, and one validation (with the training loss).
  virtual void build_validator(std::vector<data::ImageRecord> records, const std::vector<std::string>& names, int nc,
                               const ValOptions& options, Device device, int stride, const Console* console) = 0;
  virtual TaskValidation validate() = 0;
  // Before the final validation of the best weights: plots, per-class rows, and detection's COCO
  // evaluation when a COCO annotations file is given ("": none).
  virtual void prepare_final_validation(bool plots, const std::string& coco_annotations) = 0;
};

// Detection's (yolo/train/train_task_detect.cpp) and segmentation's (train_task_segment.cpp:
// label masks at 1 / mask_ratio, overlapping or one per instance).
std::unique_ptr<TrainTask> make_detect_task();
std::unique_ptr<TrainTask> make_segment_task(int mask_ratio, bool overlap);
// The run's (segmentation reads --mask-ratio and --no-overlap).
inline std::unique_ptr<TrainTask> make_train_task(const TrainOptions& o) {
  return o.task == TrainTaskKind::Segment ? make_segment_task(o.mask_ratio, !o.no_overlap_masks) : make_detect_task();
}

}  // namespace kestrel::yolo
