// Dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler: the loss is multiplied
// by the scale before backward; before the optimizer step the gradients are divided by it and
// checked for inf/NaN in the same fused pass. A step with a non-finite gradient is skipped (never
// applied) and counted, and the scale halves; after growth_interval good steps in a row it
// doubles. Disabled (bfloat16 or float32 training), every call passes straight through.
//
//   scaler.scale(loss).backward();
//   scaler.unscale(optimizer); clip_grad_norm(params, 10.0);
//   scaler.step(optimizer); scaler.update();
#pragma once
#include <cstdint>

#include "engine/tensor.h"
#include "yolo/optimizer.h"

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
  // loss * scale (recorded by autograd), or loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of the optimizer's parameters by the scale and records whether any
  // was inf or NaN. At most once between two update() calls.
  void unscale(Optimizer& optimizer);
  // Unscales if not done yet; then applies optimizer.step(skip) unless a gradient was
  // non-finite. Returns whether optimizer.step was issued (enabled, this reads one flag from the
  // device: a synchronisation, as PyTorch's; disabled, it never reads anything). skip: as
  // Optimizer::step's device flag.
  bool step(Optimizer& optimizer, const Tensor& skip = Tensor());
  // Backs off after a skipped step, grows after growth_interval good ones.
  void update();

  double scale_value() const { return state_.scale; }
  int64_t skipped_steps() const { return state_.skipped_steps; }
  const State& state() const { return state_; }
  void load_state(const State& s) { state_ = s; }

 private:
  bool enabled_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  State state_;
  bool unscaled_ = false;
  bool stepped_ = false;
  bool found_inf_ = false;
  Tensor found_flag_;  // device flag of the last unscale
};

}  // namespace kestrel::yolo
