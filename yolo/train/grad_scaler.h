// Dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler: the loss is multiplied
// by the scale before backward; before the optimizer step the gradients are divided by it and
// checked for inf/NaN in the same fused pass. A step with a non-finite gradient is skipped (never
// applied) and counted, and the scale halves; after growth_interval good steps in a row it
// doubles. Disabled (bfloat16 or float32 training), every call passes straight through.
//
//   scaler.scale(loss).backward();
//   scaler.unscale(optimizer); clip_grad_norm(params, 10.0);
//   scaler.step(optimizer); scaler.update();
//
// Enabled, the state lives where the model does, as PyTorch's scale and growth-tracker tensors:
// float32 scale, int32 growth tracker, int64 skipped-step count and the step's float32 found-inf
// flag, one-element tensors on the loss's device (CPU tensors on the CPU, the same code path),
// allocated once on the first scale() (or unscale()) and never moved, so their addresses stay
// the same from step to step. scale, unscale, step and update read nothing back to the host and
// pass no per-step value as a kernel argument (kernels/amp_scale.h): the whole sequence can be
// captured in a CUDA graph and replayed. The step decides on the device whether the update
// applies: step() hands the optimizer a combined skip flag that its kernels read.
// state() is the host view (checkpoints, logs): it reads the device and so waits for it.
#pragma once
#include <cstdint>

#include "engine/tensor.h"
#include "kernels/amp_scale.h"
#include "yolo/train/optimizer.h"

namespace kestrel::yolo {

class GradScaler {
 public:
  struct State {
    double scale = 65536.0;
    int64_t growth_tracker = 0;  // good steps since the last change of scale
    int64_t skipped_steps = 0;
  };

  explicit GradScaler(bool enabled, double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000);

  bool enabled() const { return enabled_; }
  // loss * scale, the scale read on the device (recorded by autograd; the scale takes no
  // gradient), or loss itself when disabled. The first call places the state on loss's device.
  Tensor scale(const Tensor& loss);
  // Divides every gradient of the optimizer's parameters by the scale (1 / scale rounded to
  // float32, read on the device) and sets the device found-inf flag when any was inf or NaN.
  // At most once between two update() calls.
  void unscale(Optimizer& optimizer);
  // Unscales if not done yet; then issues optimizer.step(flag) with the device flag
  // skip_flag() = (skip != 0) || found-inf, so the optimizer kernels leave parameters and state
  // unchanged after a non-finite gradient, without the host learning it. skip: as
  // Optimizer::step's optional device flag. Returns whether optimizer.step was issued: always
  // true now (the skip is decided on the device); disabled, optimizer.step(skip) as is.
  // Adam's step counts live on the device and stay put on a skipped step, as PyTorch's (whose
  // scaler does not call step() at all then).
  bool step(Optimizer& optimizer, const Tensor& skip = Tensor());
  // On the device: backs off after a non-finite step (and counts it as skipped), grows after
  // growth_interval good ones, and clears the found-inf flag for the next step.
  void update();

  // The host's record of an unscale/step begun since the last update(), taken before a step that
  // may never run on the device (a CUDA graph capture) and put back if it does not; the device
  // state is then as the last update() left it.
  struct Snapshot {
    bool unscaled = false, stepped = false;
  };
  Snapshot snapshot() const { return {unscaled_, stepped_}; }
  void restore(const Snapshot& s) {
    unscaled_ = s.unscaled;
    stepped_ = s.stepped;
  }

  // Host view of the state: reads the device once placed (a host synchronisation on CUDA:
  // checkpoints and logs only, never inside the step). Disabled, the values last loaded.
  State state() const;
  // Writes the state (the scale rounded to float32, as the device keeps it); the device tensors
  // keep their addresses.
  void load_state(const State& s);
  double scale_value() const { return state().scale; }
  int64_t skipped_steps() const { return state().skipped_steps; }

  // The device flag the last step() passed to optimizer.step: 1 when that update was skipped.
  // Undefined until the state is placed (and always when disabled).
  const Tensor& skip_flag() const { return skip_; }

 private:
  // Allocates the device state on `device` from host_ on first use; afterwards checks the device.
  void place(Device device);

  bool enabled_;
  kernels::ScaleSchedule schedule_;
  State host_;  // the state until it is placed, and always when disabled
  Tensor scale_;      // float32 [], the loss scale
  Tensor tracker_;    // int32 [], good steps since the last change
  Tensor skipped_;    // int64 [], steps skipped for a non-finite gradient
  Tensor found_inf_;  // float32 [1], this step's non-finite flag (cleared by update())
  Tensor skip_;       // float32 [1], the optimizer's combined skip flag
  bool unscaled_ = false;
  bool stepped_ = false;
};

}  // namespace kestrel::yolo
