// The Trainer behind yolo/train/trainer.h's train(): one training run's state and its phases, shared by
// the files that implement them (trainer_setup.cpp: options, run directory, data, model, optimizer,
// resume; trainer_epoch.cpp: the batches of an epoch; trainer_epoch_end.cpp: validation, results,
// checkpoints and the run's end). Private to those files and trainer.cpp.
#pragma once
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/ddp.h"
#include "dist/reducer.h"
#include "dist/timeline.h"
#include "yolo/common/console.h"
#include "yolo/common/hyp.h"
#include "yolo/common/run_dir_lock.h"
#include "yolo/common/stop_signal.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/dataset_fingerprint.h"
#include "yolo/data/image_weights.h"
#include "yolo/data/loader.h"
#include "yolo/eval/validator.h"
#include "yolo/model/model.h"
#include "yolo/model/pt_writer.h"
#include "yolo/plot/training_board.h"
#include "yolo/train/batch_prep.h"
#include "yolo/train/device_choice.h"
#include "yolo/train/early_stopping.h"
#include "yolo/train/ema.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/loss.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/rank_info.h"
#include "yolo/train/run_files.h"
#include "yolo/train/schedule.h"
#include "yolo/train/train_progress.h"
#include "yolo/train/train_resume.h"
#include "yolo/train/train_step.h"
#include "yolo/train/train_task.h"
#include "yolo/train/trainer.h"

namespace kestrel::yolo {

// One training run, as the reference's train.py (or segment/train.py: the TrainTask, task_, holds
// what differs) reads: the options resolved once (from the checkpoint when resuming), set-up in
// named phases, then epochs of batches, each epoch ending
// with validate -> record -> save, and a finish that validates the best weights. The run's state
// lives here, so resume, signals and early stopping each have one home:
//   resume:   resolve_options() and restore(); EpochProgress carries an interrupted epoch
//   signals:  StopSignal, agreed between ranks through the batches' statuses (a batch late),
//             acted on in train_epoch()
//   stopping: end_epoch() with the reference's EarlyStopping
class Trainer {
  using Clock = std::chrono::steady_clock;

 public:
  Trainer(const TrainOptions& requested, TrainResults* results)
      : requested_(requested), results_(results) {}

  int run() {
    resolve_options();
    try {
      prepare_run_directory();
      load_data();
      build_model();
      freeze_layers();
      check_image_size();
      check_ranks_agree();
      check_anchors_and_plot_labels();
      pre_reduce_precision();
      place_model();
      build_ema();
      build_optimizer();
      build_train_loader();
      build_schedule();
      build_reducer();
      build_loss();
      build_validator();
      build_step();
      restore();
    } catch (...) {
      discard_new_run_directory();
      throw;
    }
    announce();
    bool interrupted = false;
    for (int epoch = start_epoch_; epoch < options_.epochs; ++epoch) {
      if (!train_epoch(epoch)) {
        interrupted = true;
        save_interrupted(epoch);
        break;
      }
      last_completed_ = epoch;
      if (end_epoch(epoch)) {
        // A signal during the epoch's end: make sure a resumable checkpoint exists (--nosave
        // writes none before the final epoch).
        if (stop_agreed_ && options_.nosave && rank_.main()) save_checkpoint_as(last_path_, epoch, EpochProgress{});
        break;
      }
    }
    return finish(interrupted || stop_agreed_);
  }

 private:
  void resolve_options();
  void prepare_run_directory();
  // A run that fails at start-up leaves no run directory of its own behind (an existing one,
  // given with --exist-ok or --resume, stays as it was found).
  void discard_new_run_directory();
  void load_data();
  void say_train_scan();  // train_scan_lines_, once
  // The model (trainer_build.cpp), in train.py's order.
  void build_model();        // --cfg / --weights (or the checkpoint's model), weights transferred
  void freeze_layers();      // --freeze
  void check_image_size();   // img_size_: --img-size rounded up to the model's largest stride
  void check_ranks_agree();  // every rank has the same data, model and run-shaping options
  void check_anchors_and_plot_labels();  // AutoAnchor and labels.jpg, on rank 0
  void pre_reduce_precision();  // a fresh run's weights rounded to float16 values, on rank 0
  std::string cache_mode_name() const;  // --cache as data::cache_dataset_images takes it
  void place_model();        // on its device, SyncBN said, weights broadcast
  void build_ema();
  // The optimization (trainer_build.cpp).
  void build_optimizer();
  void build_train_loader();
  void build_schedule();     // learning rates, the fp16 loss scaler, early stopping
  void build_reducer();      // DDP's gradient all-reduce and buffer broadcast
  void build_loss();
  void build_validator();    // rank 0's
  void build_step();         // the training step and its batch preparation
  void restore();
  void announce();
  bool train_epoch(int epoch);  // false: interrupted inside the epoch
  void train_batch(const TaskBatch& batch, int epoch, int64_t i);
  void account(const std::vector<BatchStatus>& statuses);
  bool end_epoch(int epoch);  // true: training stops here
  void drop_pending_gradients();  // train.py's optimizer.zero_grad() at an epoch's start
  void save_checkpoint_as(const std::string& path, int64_t last_epoch, const EpochProgress& progress);
  void save_interrupted(int epoch);
  // best.pt / last.pt in the reference's format (yolo/train/reference_checkpoint.h), unless
  // --no-pt: what train.py writes at an epoch's end, and strip_optimizer's form at the run's end.
  PtWriteOptions reference_pt_options() const;
  void save_reference_pt(int64_t last_epoch);
  void strip_final_checkpoints();
  void write_opt_yaml();
  int finish(bool interrupted);
  dist::NamedTensors trainable() const;

  // The reference draws no plots while evolving.
  bool plots() const { return !options_.noplots && options_.evolve == 0; }
  int batch_per_rank() const { return options_.batch_size / rank_.world; }
  static int cores() { return static_cast<int>(std::thread::hardware_concurrency()); }

  const TrainOptions requested_;
  TrainResults* results_;
  TrainOptions options_;  // what the run uses (train.py's opt): requested_, or the checkpoint's on --resume
  StopSignal stop_;
  RankInfo rank_;
  Device device_ = Device::cpu();
  DType compute_ = DType::F32;  // the activations' type (precision_.activations)
  Precision precision_;
  std::optional<ResumePlan> resume_;
  std::optional<Console> out_;
  // The run directory, its lock and checkpoints' paths (yolo/train/run_files.h), and their copies
  // the phases read.
  std::optional<RunFiles> files_;
  std::string save_dir_, weights_dir_, last_path_, best_path_;
  std::string last_pt_path_, best_pt_path_;  // the reference's files beside them
  bool write_pt_ = false;                     // without --no-pt (detection and segmentation)
  std::string data_yaml_;                     // --data resolved (opt.yaml's data)
  Hyp hyp_;
  std::optional<data::DatasetConfig> dataset_config_;
  int num_classes_ = 0;  // 1 with --single-cls (train.py's nc)
  std::vector<std::string> names_;
  data::DatasetSplit train_split_;
  DatasetFingerprint train_index_;  // of train_split_'s records, for checkpoints and --resume
  std::string cfg_text_;
  ModelConfig model_config_;  // cfg_text_ parsed, with a hyp's anchor count applied
  // Said in the reference's order (after the optimizer line and the loaders), though found earlier:
  // the train split's scan and warnings, and AutoAnchor's report.
  std::vector<std::string> train_scan_lines_;
  std::string autoanchor_report_;
  std::unique_ptr<TrainTask> task_;  // detection's or segmentation's model, data, loss and validation
  std::shared_ptr<layers::Module> model_, ema_model_;  // task_'s
  int max_stride_ = 32;  // the model's largest stride, at least 32 (train.py's gs)
  int img_size_ = 0;     // --img-size as a multiple of max_stride_ (train.py's imgsz)
  std::unique_ptr<Optimizer> optimizer_;
  int workers_ = 0;  // the loader's threads (data::dataloader_workers)
  std::shared_ptr<data::ImageWeights> image_weights_;  // --image-weights
  int64_t batches_per_epoch_ = 0;  // this rank's (train.py's nb)
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<dist::Reducer> reducer_;
  std::unique_ptr<EarlyStopping> stopper_;
  std::unique_ptr<BatchPrep> batch_prep_;
  std::unique_ptr<dist::TraceWriter> trace_;
  std::optional<TrainingBoard> board_;  // rank 0, unless --no-tensorboard
  dist::NamedTensors device_buffers_;
  std::unique_ptr<dist::TensorBroadcaster> buffer_broadcaster_;
  std::unique_ptr<TrainStep> step_;

  // Where the run stands.
  int start_epoch_ = 0, last_completed_ = -1;
  EpochProgress progress_, resumed_progress_;
  double best_fitness_ = 0;
  int64_t nan_steps_ = 0;
  TaskValidation last_val_;
  int64_t batches_run_ = 0;   // by this process
  bool accumulated_ = false;  // gradients added since the last optimizer step
  bool stop_agreed_ = false;  // every rank knows a stop was requested
  double overlap_sum_ = 0;
  int64_t overlap_steps_ = 0;
  bool graphs_warned_ = false;  // the fall-back to eager steps was reported
  Clock::time_point t_start_ = Clock::now(), t_epoch_;
};

}  // namespace kestrel::yolo
