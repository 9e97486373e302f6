// One training step as the device sees it: buffer broadcast, forward, loss, backward with the
// bucketed all-reduce, unscale, clip, optimizer and EMA are enqueued without any host read, and
// the host learns each batch's loss and flags one batch later (StepStatusQueue). A non-finite
// loss is therefore handled on the device:
//   - each batch's flags, summed over the ranks, are added to a device scalar that covers the
//     current accumulation window;
//   - the optimizer and EMA kernels read that scalar: a non-finite loss on any rank, anywhere in
//     the window, skips the window's update on every rank, step counts included (Adam's and the
//     EMA's counts live on the device and advance only when not skipped), and its gradients are
//     zeroed as after any step.
// Per batch (the trainer's train_batch):
//   step.forward_backward(x, targets, ni, step_now, stop_requested);
//   for (const BatchStatus& s : step.take_previous()) account(s);   // a batch late
//   if (step_now) step.optimizer_step();
// and where the host must know everything (an epoch's end, a stop): account(step.drain()).
#pragma once
#include <deque>
#include <vector>

#include "dist/ddp.h"
#include "dist/reducer.h"
#include "yolo/ema.h"
#include "yolo/grad_scaler.h"
#include "yolo/loss.h"
#include "yolo/model.h"
#include "yolo/optimizer.h"
#include "yolo/step_status.h"

namespace kestrel::yolo {

// What a step works with; the trainer owns them. ema, reducer and buffers may be null (the EMA
// lives on rank 0 only; one process has no reducer; SyncBN needs no buffer broadcast).
struct TrainStepParts {
  DetectionModel* model = nullptr;
  const ComputeLoss* loss = nullptr;
  Optimizer* optimizer = nullptr;
  GradScaler* scaler = nullptr;
  ModelEma* ema = nullptr;
  dist::Reducer* reducer = nullptr;
  dist::TensorBroadcaster* buffers = nullptr;
};

class TrainStep {
 public:
  TrainStep(TrainStepParts parts, const RankInfo& rank, Device device);

  // Forward, loss and backward of one batch: x the model input, targets on the device (checked
  // on the host before the upload: ComputeLoss::check_targets). step_now: an optimizer step
  // follows this batch (under DDP the gradients are all-reduced in this backward). Issues the
  // batch's status with this rank's stop request.
  void forward_backward(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
                        bool stop_requested);
  // The statuses of the batches before the newest one, oldest first: one host read each, of
  // work issued a forward and backward ago.
  std::vector<BatchStatus> take_previous();
  // Every outstanding status, the newest batch's included (waits for it).
  std::vector<BatchStatus> drain();
  // Whether take_previous() would find its statuses already there (never waiting for them).
  bool previous_ready() const { return status_.pending() < 2 || status_.oldest_ready(); }
  // Unscale, clip at norm 10, optimizer, loss-scale update, zero gradients, EMA; skipped on the
  // device when the window held a non-finite loss.
  void optimizer_step();

  // The open accumulation window holds a non-finite loss that the host knows of (call after
  // drain(); goes into checkpoints with pending gradients), and its restore on resume.
  bool window_nonfinite() const { return host_window_bad_; }
  void set_window_nonfinite(bool bad);

 private:
  struct Pending {
    bool ends_window = false;  // an optimizer step follows the batch
  };
  BatchStatus settle(BatchStatus s);

  TrainStepParts p_;
  RankInfo rank_;
  Device device_;
  StepStatusQueue status_;
  std::deque<Pending> pending_;  // parallel to status_'s entries
  Tensor window_;                // float32 [1] on the device: non-finite losses in the window
  bool host_window_bad_ = false;  // what the host has learnt of the open window so far
};

}  // namespace kestrel::yolo
