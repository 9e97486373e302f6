// The Trainer's epoch: its batches, each prepared, stepped and accounted.
#include "yolo/train/trainer_run.h"

#include <algorithm>
#include <csignal>

#include "engine/allocator.h"

namespace kestrel::yolo {

// --- an epoch ------------------------------------------------------------------------------------

bool Trainer::train_epoch(int epoch) {
  model_->train(true);
  progress_ = epoch == start_epoch_ ? resumed_progress_ : EpochProgress{};
  progress_.items = static_cast<int>(task_->loss_names().size());
  // A checkpoint from before Kestrel followed this rule may still carry them at an epoch's start.
  if (progress_.next_batch == 0) drop_pending_gradients();
  task_->start_epoch(epoch, progress_.next_batch);
  out_->line(progress_header(task_->loss_names()));
  t_epoch_ = Clock::now();
  const int64_t shown = options_.max_batches > 0 ? std::min<int64_t>(batches_per_epoch_, options_.max_batches) : batches_per_epoch_;
  ProgressCadence cadence = out_->cadence();
  int64_t instances = 0, size = 0;  // the newest batch's, for the bar
  const auto show = [&](bool last) {
    const double secs = std::chrono::duration<double>(Clock::now() - t_epoch_).count();
    const double mem = device_.is_cuda() ? allocator_stats(device_).reserved / 1e9 : 0.0;
    if (last || cadence.due(progress_.next_batch, shown, secs))
      out_->progress(progress_line(epoch, options_.epochs, mem, progress_, instances, size, progress_.next_batch, shown, secs),
                     last);
  };
  for (int64_t i = progress_.next_batch; i < shown; ++i) {
    std::optional<TaskBatch> b = task_->next();
    if (!b) break;
    train_batch(*b, epoch, i);
    progress_.next_batch = i + 1;
    instances = b->batch.targets.size(0);
    size = b->batch.images.size(1);
    // The mean losses are learnt a batch late: no bar before the first is known (it would show
    // losses of 0), and the epoch's last line waits for the drain below, so that it shows the
    // epoch's mean as results.csv records it.
    if (out_->on() && i + 1 < shown && progress_.seen + progress_.skipped > 0) show(false);
    // Stop at an optimizer-step boundary: nothing is half-accumulated in the saved state.
    if (stop_agreed_ && !accumulated_) {
      account(step_->drain());
      return false;
    }
  }
  account(step_->drain());  // the last batches' losses and flags, before the epoch is judged
  // train.py zeroes the gradients before each epoch's first batch: what was accumulated towards a
  // step that this epoch's end cut short never reaches an optimizer step. Dropped here, so that no
  // checkpoint carries it and DDP ranks need not average it.
  drop_pending_gradients();
  if (out_->on() && progress_.next_batch == shown && size > 0) show(true);  // size: a batch ran
  KESTREL_CHECK(progress_.seen > 0 || progress_.skipped == 0, "every training step of epoch ", epoch,
                " produced a NaN/Inf loss; lower lr0 (--hyp), use --amp off or check the labels");
  if (progress_.skipped) out_->line("WARNING: ", progress_.skipped, " steps with a NaN/Inf loss were skipped this epoch");
  return true;
}

void Trainer::drop_pending_gradients() {
  if (!accumulated_) return;
  step_->discard_gradients();
  accumulated_ = false;
}

void Trainer::train_batch(const TaskBatch& batch, int epoch, int64_t i) {
  const int64_t ni = i + batches_per_epoch_ * epoch;
  if (++batches_run_ == options_.interrupt_after) stop_.raise_as(SIGINT);
  schedule_->warmup(ni, epoch);
  const StepInputs in = batch_prep_->prepare(batch.batch, epoch, i, ni);
  // Segmentation's label masks, beside the targets (the loss reads them as float).
  const Tensor masks = batch.masks.defined() && device_.is_cuda() ? batch.masks.to(device_, /*non_blocking=*/true) : batch.masks;
  const bool step_now = schedule_->step_due(ni);
  // The batch's flags (a non-finite loss, a stop request) are summed over the ranks on the
  // device and read here one batch later, so every rank learns them at the same batch: a
  // non-finite loss anywhere skips its window's optimizer step everywhere (on the device), and a
  // stop request anywhere stops every rank at the same optimizer-step boundary.
  step_->run(in.input, in.targets, ni, step_now, stop_.received() != 0, masks);
  if (step_->graphs_on() && !graphs_warned_ && !step_->graphs_disabled_reason().empty()) {
    out_->line("WARNING: CUDA graphs are off for the rest of this run (--cuda-graph auto): ", step_->graphs_disabled_reason());
    graphs_warned_ = true;
  }
  accumulated_ = !step_now;
  account(step_->take_previous());
  if (step_now) {
    schedule_->record_step(ni);
    if (reducer_ && trace_) {  // --trace: waits for the step's collectives to time them
      const dist::StepTimeline& t = reducer_->last_timeline();
      overlap_sum_ += dist::overlap_efficiency(t);
      ++overlap_steps_;
      trace_->add(t);
    }
    if (options_.check_sync && rank_.world > 1) {
      dist::check_sync(*rank_.group, model_->named_parameters(), str("parameters after step ", ni));
      if (buffer_broadcaster_) buffer_broadcaster_->check_structure();
    }
  }
  if (rank_.main() && ni < 3 && plots()) {
    const std::string mosaic = save_dir_ + "/train_batch" + std::to_string(ni) + ".jpg";
    task_->plot_batch(batch, mosaic);
    if (board_) board_->log_image(mosaic, epoch);
  }
}

void Trainer::account(const std::vector<BatchStatus>& statuses) {
  for (const BatchStatus& s : statuses) {
    stop_agreed_ = stop_agreed_ || s.stop_ranks > 0;
    if (s.nonfinite_ranks > 0) {
      ++nan_steps_;
      ++progress_.skipped;
    } else if (s.items == 4) {
      const double items[4] = {s.box, s.seg, s.obj, s.cls};
      progress_.add(items);
    } else {
      progress_.add(s.box, s.obj, s.cls);
    }
  }
}

}  // namespace kestrel::yolo
