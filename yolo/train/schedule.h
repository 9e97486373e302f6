// The reference train.py's learning-rate, momentum and accumulation schedule: a LambdaLR over a
// linear or cosine one-cycle factor lf(epoch), stepped after each epoch, and a warmup over the
// first nw = max(round(warmup_epochs * nb), 100) iterations that moves the bias group's lr down
// from warmup_bias_lr and the other groups' up from 0 to lr0 * lf(epoch), SGD's momentum from
// warmup_momentum to momentum, and the accumulation count from 1 to 64 / batch_size.
//
// A training loop drives it as the reference's does:
//   LrSchedule sched(hyp, epochs, cos_lr, batch_size, nb, optimizer);
//   sched.set_last_epoch(start_epoch - 1);            // "do not move"
//   for epoch: optimizer.zero_grad();
//     for i: ni = i + nb * epoch; sched.warmup(ni, epoch); forward, backward;
//            if (sched.step_due(ni)) { unscale, clip, step, update, zero_grad, ema;
//                                      sched.record_step(ni); }
//     sched.epoch_end();                              // scheduler.step()
// The state (last_epoch, accumulate, last_opt_step) goes into checkpoints; with it restored, a
// resumed run steps exactly where the uninterrupted one would (the reference resets
// last_opt_step to -1 on resume, which can move the first step of the resumed epoch).
#pragma once
#include <cstdint>

#include "yolo/common/hyp.h"
#include "yolo/train/optimizer.h"

namespace kestrel::yolo {

// numpy.interp for one segment: fp0 below xp0, fp1 at and above xp1, else
// slope * (x - xp0) + fp0 with slope = (fp1 - fp0) / (xp1 - xp0).
double interp(double x, double xp0, double xp1, double fp0, double fp1);

// The reference's linear lf: (1 - x / epochs) * (1 - lrf) + lrf, or with cos_lr its
// one_cycle(1, lrf, epochs): ((1 - cos(x * pi / epochs)) / 2) * (lrf - 1) + 1.
double lr_factor(double x, int64_t epochs, double lrf, bool cos_lr);

// max(round(warmup_epochs * nb), 100).
int64_t warmup_iterations(double warmup_epochs, int64_t batches_per_epoch);

class LrSchedule {
 public:
  struct State {
    int64_t last_epoch = 0;
    int64_t accumulate = 1;
    int64_t last_opt_step = -1;
  };

  // As LambdaLR's construction: every group's initial_lr = its lr, lr = initial_lr * lf(0),
  // last_epoch 0. accumulate starts at max(round(64 / batch_size), 1).
  LrSchedule(const Hyp& hyp, int64_t epochs, bool cos_lr, int64_t batch_size,
             int64_t batches_per_epoch, Optimizer& optimizer);

  double lf(double x) const { return lr_factor(x, epochs_, hyp_.lrf, cos_lr_); }
  int64_t warmup_iterations() const { return nw_; }

  // Before iteration ni (= i + nb * epoch): while ni <= nw, sets accumulate and every group's lr
  // (and SGD's momentum) by interpolation; later iterations leave them as they are.
  void warmup(int64_t ni, int64_t epoch);
  int64_t accumulate() const { return state_.accumulate; }
  // The reference's `ni - last_opt_step >= accumulate`.
  bool step_due(int64_t ni) const { return ni - state_.last_opt_step >= state_.accumulate; }
  void record_step(int64_t ni) { state_.last_opt_step = ni; }

  // scheduler.step(): last_epoch += 1, every group's lr = initial_lr * lf(last_epoch).
  void epoch_end();
  // scheduler.last_epoch = value (the reference sets start_epoch - 1 before its loop).
  void set_last_epoch(int64_t value) { state_.last_epoch = value; }

  const State& state() const { return state_; }
  void load_state(const State& s) { state_ = s; }

 private:
  Hyp hyp_;
  int64_t epochs_;
  bool cos_lr_;
  int64_t batch_size_;
  int64_t nw_;
  Optimizer& optimizer_;
  State state_;
};

}  // namespace kestrel::yolo
