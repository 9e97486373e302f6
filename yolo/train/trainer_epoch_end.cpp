// The Trainer at an epoch's end and the run's: validation, results, checkpoints, finish.
#include "yolo/train/trainer_run.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "io/atomic_file.h"
#include "yolo/common/run_dir.h"
#include "yolo/model/weights.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plots.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/rank_collectives.h"
#include "yolo/train/reference_checkpoint.h"
#include "yolo/train/reference_opt.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;

bool Trainer::end_epoch(int epoch) {
  if (rank_.world > 1) {
    // Every rank must hold the same model and optimizer state: compare checksums, abort loudly.
    dist::NamedTensors state = model_->named_parameters();
    for (auto& t : optimizer_->state_tensors())
      if (t.second.device() == device_) state.push_back(t);
    dist::check_sync(*rank_.group, state, str("parameters and optimizer state after epoch ", epoch));
    if (overlap_steps_)
      out_->line(str("DDP: ", rank_.world, " ranks, overlap efficiency ",
                     short_number(100.0 * overlap_sum_ / overlap_steps_), "% of all-reduce time hidden behind backward"));
    if (trace_) trace_->write(str(options_.trace, ".rank", rank_.rank));
  }
  std::vector<double> lrs;
  for (const auto& g : optimizer_->groups()) lrs.push_back(g.lr);
  lrs.resize(3, 0.0);
  schedule_->epoch_end();

  bool stop_early = false;
  if (rank_.main()) {
    const bool final_epoch = epoch + 1 == options_.epochs || stopper_->possible_stop();
    if (!options_.noval || final_epoch) {
      last_val_ = task_->validate();
      out_->raw(last_val_.table);
      if (image_weights_) image_weights_->set_maps(last_val_.maps);
    }
    const double fi = last_val_.fitness;
    stop_early = stopper_->update(epoch, fi);
    if (fi > best_fitness_) best_fitness_ = fi;
    // The row first, then the checkpoint: a kill between them leaves a row past the checkpoint's
    // epoch, which --resume drops and writes again.
    std::vector<double> row(progress_.mloss, progress_.mloss + progress_.items);
    row.insert(row.end(), last_val_.metrics.begin(), last_val_.metrics.end());
    row.insert(row.end(), lrs.begin(), lrs.end());
    const std::vector<std::string>& columns = task_->results_columns();
    ResultsCsv(save_dir_ + "/results.csv", columns, task_->results_width()).append(epoch, row);
    if (board_) {
      std::vector<std::pair<std::string, double>> scalars;
      for (size_t k = 0; k < columns.size(); ++k) scalars.emplace_back(columns[k], row[k]);
      board_->log_scalars(epoch, scalars);
    }
    if (!options_.nosave || (final_epoch && options_.evolve == 0)) {
      save_checkpoint_as(last_path_, epoch, EpochProgress{});
      save_reference_pt(epoch);
      const std::string epoch_file = weights_dir_ + "/epoch" + std::to_string(epoch);
      if (best_fitness_ == fi) publish_copy(last_path_, best_path_);
      if (best_fitness_ == fi && write_pt_) publish_copy(last_pt_path_, best_pt_path_);
      if (options_.save_period > 0 && epoch % options_.save_period == 0) {
        publish_copy(last_path_, epoch_file + ".safetensors");
        if (write_pt_) publish_copy(last_pt_path_, epoch_file + ".pt");
      }
    }
    if (plots()) plot_results(save_dir_ + "/results.csv", save_dir_ + "/results.png");
    if (stop_early)
      out_->line("Stopping training early as no improvement observed in last ", stopper_->patience(),
                 " epochs. Best results observed at epoch ", stopper_->state().best_epoch,
                 ", best model saved as best.safetensors.\nTo change it pass --patience N, or --patience 0 to "
                 "disable early stopping.");
  }
  // Rank 0's early stop, and a signal any rank received meanwhile (during validation, say).
  wait_for_rank0(rank_, str("validation and saving of epoch ", epoch));
  const std::vector<int> raised = ranks_raising(rank_, device_, {stop_early, stop_.received() != 0});
  stop_agreed_ = stop_agreed_ || raised[1] > 0;
  return raised[0] > 0 || stop_agreed_;
}

void Trainer::save_checkpoint_as(const std::string& path, int64_t last_epoch, const EpochProgress& progress) {
  // The checkpoint before this one stays, as last.prev.safetensors, until the run ends: a last
  // that is damaged on disk (its checksums say so when read) leaves that to resume from. Published
  // (a hard link renamed into place) before the new last replaces the old, so last is never missing.
  if (path == last_path_) files_->keep_previous();
  CheckpointInfo info;
  info.epoch = last_epoch;
  info.best_fitness = best_fitness_;
  info.hyp = hyp_;
  info.options = options_json(options_, cfg_text_, num_classes_, names_);
  info.progress = RunProgress{progress, nan_steps_, stopper_->state(), accumulated_, step_->window_nonfinite(),
                              train_index_, image_weights_ ? image_weights_->maps() : std::vector<double>{},
                              reducer_ ? reducer_->settled_layout() : std::nullopt}
                      .to_json();
  TrainingObjects objs{model_.get(), ema_.get(), optimizer_.get(), schedule_.get(), scaler_.get()};
  save_checkpoint(path, objs, info, accumulated_ ? trainable() : PendingGradients{});
}

// What train.py attaches to the model it saves, and the rest of its checkpoint: names, the model
// yaml, hyp as the loss scaled it (box, cls, obj per output level, class count and image size;
// weight decay by the nominal batch; label smoothing added), opt as vars(opt), the date.
PtWriteOptions Trainer::reference_pt_options() const {
  PtWriteOptions o;
  o.names = names_;
  o.model_yaml = cfg_text_;
  // segment/train.py scales and attaches them as train.py does.
  const double nl = static_cast<double>(task_->head().nl), nc = num_classes_;
  Hyp h = hyp_;
  h.box *= 3.0 / nl;
  h.cls *= nc / 80.0 * 3.0 / nl;
  h.obj *= (img_size_ / 640.0) * (img_size_ / 640.0) * 3.0 / nl;
  h.weight_decay = scaled_weight_decay(hyp_.weight_decay, options_.batch_size);
  o.hyp = reference_hyp(h);
  o.hyp.emplace_back("label_smoothing", options_.label_smoothing);
  o.best_fitness = best_fitness_;
  o.opt = reference_opt(options_, {&hyp_, data_yaml_, save_dir_, options_.resume.value_or("")});
  o.date = iso_now();
  return o;
}

// train.py's (or segment/train.py's) last.pt of the epoch just completed. An interruption inside an epoch leaves it as it
// was (the reference saves only at an epoch's end), while last.safetensors holds the batch reached.
void Trainer::save_reference_pt(int64_t last_epoch) {
  if (!write_pt_) return;
  PtTrainingState state;
  state.epoch = last_epoch;
  state.ema = ema_model_.get();
  state.updates = ema_->updates();
  state.optimizer = pt_optimizer_state(*optimizer_);
  write_reference_pt(*model_, last_pt_path_, reference_pt_options(), &state);
}

// An epoch cut short by a signal: last holds it up to the batch reached, and no results row.
void Trainer::save_interrupted(int epoch) {
  if (rank_.main()) {
    save_checkpoint_as(last_path_, epoch - 1, progress_);
    out_->line("\nInterrupted in epoch ", epoch, " after batch ", progress_.next_batch, "/", batches_per_epoch_, ": saved ", last_path_);
  }
}

// As the reference's strip_optimizer once a run has ended (all epochs, or an early stop; not an
// interruption, whose last must stay resumable): last and best keep the EMA weights in float16.
// The epoch<N> copies keep the full state.
// The .pt files as strip_optimizer leaves them: the stripped safetensors' EMA weights (float16)
// written as the model, read through the EMA model (which the final validation then loads with
// best's weights anyway).
void Trainer::strip_final_checkpoints() {
  auto say = [&](const std::string& path, uint64_t bytes) {
    char size[32];
    std::snprintf(size, sizeof size, "%.1fMB", bytes / 1e6);
    out_->line("Optimizer stripped from ", path, ", ", size);
  };
  const PtWriteOptions pt = write_pt_ ? reference_pt_options() : PtWriteOptions{};
  for (const auto& [path, bytes] : files_->finish()) {
    say(path, bytes);
    const std::string pt_path = path == last_path_ ? last_pt_path_ : best_pt_path_;
    if (write_pt_ && fs::exists(pt_path))
      say(pt_path, write_stripped_pt(path, pt_path, *ema_model_, pt));
  }
}

int Trainer::finish(bool interrupted) {
  const double hours = std::chrono::duration<double>(Clock::now() - t_start_).count() / 3600.0;
  // In the reference's order: the epochs' time, the stripped checkpoints, the best weights'
  // validation, then where the results are.
  const int completed = std::max(0, last_completed_ - start_epoch_ + 1);
  out_->line(str("\n", completed, " epoch", completed == 1 ? "" : "s", " completed in ", short_number(hours), " hours."));
  if (rank_.main() && !interrupted) strip_final_checkpoints();
  // As the reference: the best weights validated once more (the stripped file, which is what the
  // run hands on), with plots (also after an early stop or an interruption).
  if (rank_.main() && fs::exists(best_path_)) {
    out_->line("\nValidating ", best_path_, "...");
    load_inference_weights(*ema_model_, best_path_);
    out_->line("Fusing layers... \n", task_->ema_summary(640, /*fused=*/true));  // as attempt_load there
    // As train.py on COCO (save_json=is_coco): the official metric on the best weights.
    const std::vector<std::string>& val = dataset_config_->val;
    const bool coco = val.size() == 1 && val[0].ends_with("coco/val2017.txt");
    task_->prepare_final_validation(
        plots(), coco ? (fs::path(dataset_config_->root) / "annotations/instances_val2017.json").string() : std::string());
    out_->raw(task_->validate().table);
  }
  if (rank_.main() && results_) *results_ = last_val_.results;
  if (board_) board_->log_result_plots(std::max(last_completed_, 0));
  if (nan_steps_) out_->line(nan_steps_, " steps with a NaN/Inf loss were skipped in total");
  if (step_ && step_->graphs_on()) {
    const GraphStats& g = step_->graph_stats();
    out_->line("CUDA graphs: ", g.replays, " of ", g.replays + g.eager_steps, " batches replayed from ", g.captures,
               " capture", g.captures == 1 ? "" : "s",
               step_->graphs_disabled_reason().empty() ? std::string() : "; given up: " + step_->graphs_disabled_reason());
  }
  out_->line("Results saved to ", save_dir_);
  wait_for_rank0(rank_, "the final validation");
  if (!interrupted) return 0;
  const int sig = stop_.received() ? stop_.received() : SIGTERM;
  out_->line("Stopped by ", sig == SIGINT ? "SIGINT" : "SIGTERM", " (exit status ", 128 + sig, "); continue with: kestrel ",
             options_.task == TrainTaskKind::Segment ? "segment train" : "train", " --resume ", last_path_);
  return 128 + sig;
}

}  // namespace kestrel::yolo
