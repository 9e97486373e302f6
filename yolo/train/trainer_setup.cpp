// The Trainer's set-up phases around the model's and the optimization's (trainer_build.cpp): the
// options, the run directory, the data; and after them the resumed state and the announcement.
#include "yolo/train/trainer_run.h"

#include <filesystem>

#include "dist/env.h"
#include "io/atomic_file.h"
#include "kernels/cuda_check.h"
#include "yolo/common/run_dir.h"
#include "yolo/data/data_argument.h"
#include "yolo/model/release_weights.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/device_choice.h"
#include "yolo/train/rank_collectives.h"
#include "yolo/train/reference_opt.h"
#include "yolo/train/train_echo.h"
#include "yolo/common/version.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;

// --- set-up ------------------------------------------------------------------------------------

void Trainer::resolve_options() {
  options_ = requested_;
  if (options_.resume) {
    resume_ = plan_resume(requested_);
    options_ = resume_->options;
  }
  task_ = make_train_task(options_);
  dist::DistFlags flags;
  flags.timeout = std::chrono::seconds(static_cast<int64_t>(options_.dist_timeout));
  const dist::DistOptions dopt = dist::resolve_dist_options(flags, dist::process_environment());
  rank_.rank = dopt.rank;
  rank_.world = dopt.world_size;
  rank_.local = dopt.local_rank;
  rank_.phase_limit = std::chrono::milliseconds(static_cast<int64_t>(options_.dist_phase_timeout * 1000));
  out_.emplace(rank_.main());
  // As train.py's print_args (an evolution prints its options once, not per generation).
  if (requested_.evolve == 0) out_->line(out_->colour("train: "), args_text(train_args_echo(requested_)));
  // Checked before any process group or worker exists, so a wrong batch fails at once everywhere.
  KESTREL_CHECK(options_.batch_size % rank_.world == 0, "--batch-size ", options_.batch_size,
                " must be a multiple of the world size ", rank_.world);
  KESTREL_CHECK(!options_.image_weights || rank_.world == 1, "--image-weights is not compatible with multi-process ",
                "(DDP) training, as in the reference; train in one process or drop it");
  KESTREL_CHECK(!options_.image_weights || !options_.rect, "--image-weights draws images across the rectangular ",
                "batches, whose images must share a shape; drop --rect or --image-weights");
  KESTREL_CHECK(!options_.quad || (options_.batch_size / rank_.world) % 4 == 0, "--quad makes one image of every 4: the ",
                "batch per rank (", options_.batch_size / rank_.world, ") must be a multiple of 4");
  device_ = pick_device(options_.device, rank_.local);
  out_->line(startup_line(device_));
  // This rank's GPU is current on this thread from here on: nothing creates a context on GPU 0.
  if (device_.is_cuda()) KESTREL_CUDA_CHECK(cudaSetDevice(device_.index));
  if (rank_.world > 1) rank_.group = dist::init_process_group(device_.is_cuda() ? "nccl" : "gloo", dopt, device_);
  precision_ = pick_precision(options_.amp, device_);
  compute_ = precision_.activations;
  if (resume_)
    for (const std::string& note : resume_->notes) out_->line("--resume: ", note);
  if (options_.sync_bn && rank_.world == 1)
    out_->line("WARNING: --sync-bn is ignored in a single process; it applies to DDP training with several ranks");
}

void Trainer::prepare_run_directory() {
  RunFilesOptions fo;
  fo.project = options_.project;
  fo.name = options_.name;
  fo.exist_ok = options_.exist_ok;
  if (resume_) fo.resume_dir = resume_->save_dir;
  fo.unclaimed = options_.evolve > 0;  // evolve() holds the directory across its generations
  files_.emplace(rank_, device_, fo);
  save_dir_ = files_->save_dir();
  weights_dir_ = files_->weights_dir();
  last_path_ = files_->last();
  best_path_ = files_->best();
  hyp_ = resume_             ? resume_->info.hyp
         : options_.hyp_values     ? *options_.hyp_values
         : options_.hyp.empty()    ? Hyp{}
                             : load_hyp(options_.hyp);
  hyp_.label_smoothing = options_.label_smoothing;
  out_->line(out_->colour("hyperparameters: "), hyp_echo(hyp_));
  last_pt_path_ = (fs::path(last_path_).replace_extension(".pt")).string();
  best_pt_path_ = (fs::path(best_path_).replace_extension(".pt")).string();
  write_pt_ = !options_.no_pt;
  // The reference's hyp.yaml (its keys, order and floats); opt.yaml once --data is resolved.
  if (rank_.main()) write_file_atomic(save_dir_ + "/hyp.yaml", python_yaml_dump(reference_hyp(hyp_)));
  if (rank_.main() && !options_.no_tensorboard) {
    board_.emplace(save_dir_, resume_ ? std::optional<int64_t>(resume_->info.epoch + 1) : std::nullopt);
    out_->line(out_->colour("TensorBoard: "), "Start with 'tensorboard --logdir ", fs::path(save_dir_).parent_path().string(),
               "', view at http://localhost:6006/");
  }
}

// opt.yaml as train.py's yaml_save(vars(opt)): its keys, order and types (hyp the values, data
// the resolved yaml), so that its `train.py --resume weights/last.pt` reads it; Kestrel's own
// options follow. A resumed run rewrites it, as the reference's does (resume: true).
void Trainer::write_opt_yaml() {
  const ReferenceOptContext c{&hyp_, data_yaml_, save_dir_, options_.resume.value_or("")};
  write_file_atomic(save_dir_ + "/opt.yaml", python_yaml_dump(opt_yaml_values(options_, c)));
}

void Trainer::discard_new_run_directory() {
  if (!files_ || !files_->created()) return;
  board_.reset();  // its event file is open in the directory
  if (const std::string warning = files_->discard(); !warning.empty()) out_->line(warning);
}

void Trainer::load_data() {
  // Downloads and the synthetic set are rank 0's, first. Then each other node's local rank 0
  // fetches what its own disk lacks (nothing, where the nodes share the folder), before any other
  // rank reads: once per node, as the reference's torch_distributed_zero_first(LOCAL_RANK), but
  // never two nodes at once into one shared folder.
  const std::string data_yaml = rank_.main() ? resolve_data(options_.data) : std::string();
  if (rank_.main() && !resume_) fetch_missing_weights(options_.weights);
  wait_for_rank0(rank_, "writing the dataset");
  if (!rank_.main() && rank_.local == 0) {
    resolve_data(options_.data);
    if (!resume_) fetch_missing_weights(options_.weights);
  }
  wait_for_rank0(rank_, "each node's downloads");
  dataset_config_ = data::load_dataset_config(rank_.main() ? data_yaml : resolve_data(options_.data));
  data_yaml_ = fs::absolute(dataset_config_->yaml_path).lexically_normal().string();
  if (rank_.main()) write_opt_yaml();
  num_classes_ = options_.single_cls ? 1 : dataset_config_->nc;
  names_ = options_.single_cls ? std::vector<std::string>{"item"} : dataset_config_->names;
  const auto train_split = [&] {
    return data::load_split(*dataset_config_, "train", dataset_config_->nc, options_.single_cls, true, 0, false,
                            task_->polygons());
  };
  if (rank_.main()) train_split_ = train_split();
  wait_for_rank0(rank_, "the train label cache");  // rank 0 builds it, the others then read it
  if (!rank_.main()) train_split_ = train_split();
  train_index_ = dataset_fingerprint(train_split_.records);
  train_scan_lines_ = {train_split_.summary};
  train_scan_lines_.insert(train_scan_lines_.end(), train_split_.warnings.begin(), train_split_.warnings.end());
  if (train_split_.records.empty()) say_train_scan();
  KESTREL_CHECK(!train_split_.records.empty(), "no usable training images in ", dataset_config_->yaml_path,
                ": check the `train` entry and the label files");
}

void Trainer::say_train_scan() {
  for (const std::string& l : train_scan_lines_) out_->line("train: ", l);
  train_scan_lines_.clear();
}

// After the Reducer exists, so that pending gradients land in its buffers.
void Trainer::restore() {
  if (!resume_) {
    schedule_->set_last_epoch(-1);
    return;
  }
  TrainingObjects objs{model_.get(), ema_.get(), optimizer_.get(), schedule_.get(), scaler_.get()};
  const CheckpointInfo info = load_checkpoint(resume_->path, objs, trainable());
  start_epoch_ = static_cast<int>(info.epoch) + 1;
  last_completed_ = static_cast<int>(info.epoch);
  best_fitness_ = info.best_fitness;
  const RunProgress run = RunProgress::from_json(info.progress, resume_->path);
  resumed_progress_ = run.epoch;
  nan_steps_ = run.nan_steps;
  stopper_->load_state(run.stopper);
  accumulated_ = run.accumulated;
  step_->set_window_nonfinite(run.window_nonfinite);
  if (image_weights_) image_weights_->set_maps(run.class_maps);
  // Every rank reads the checkpoint; rank 0's layout is the one adopted (broadcast).
  if (reducer_ && run.bucket_layout && !reducer_->adopt_layout(*run.bucket_layout))
    out_->line("--resume: the checkpoint's gradient buckets were laid out under other bucket options; laying them out anew");
  KESTREL_CHECK(start_epoch_ < options_.epochs, resume_->path, " finished all ", options_.epochs,
                " epochs already; nothing to resume");
  const std::string dataset_note =
      check_resume_dataset(run.dataset, train_index_, resumed_progress_.next_batch, batches_per_epoch_, resume_->path);
  if (!dataset_note.empty()) out_->line("--resume: ", dataset_note);
  if (rank_.main()) {
    const int dropped = ResultsCsv(save_dir_ + "/results.csv", task_->results_columns(), task_->results_width())
                            .keep_through(static_cast<int>(info.epoch));
    if (dropped) out_->line("--resume: dropped ", dropped, " results.csv row(s) past the checkpoint's epoch ", info.epoch);
  }
  out_->line("Resuming training from ", resume_->path, " from epoch ", start_epoch_,
             resumed_progress_.next_batch ? str(" batch ", resumed_progress_.next_batch) : std::string(), " to ",
             options_.epochs, " total epochs");
  schedule_->set_last_epoch(start_epoch_ - 1);
}

void Trainer::announce() {
  out_->line("Image sizes ", img_size_, " train, ", img_size_, " val");
  out_->line("Using ", workers_, " dataloader workers per rank, ", rank_.world, " rank", rank_.world > 1 ? "s" : "",
             ", ", precision_.describe(), " compute on ", device_.str());
  out_->line("Logging results to ", save_dir_);
  out_->line("Starting training for ", options_.epochs, " epochs...");
}

}  // namespace kestrel::yolo
