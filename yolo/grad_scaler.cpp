#include "yolo/grad_scaler.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"

namespace kestrel::yolo {

GradScaler::GradScaler(bool enabled, double init_scale, double growth_factor,
                       double backoff_factor, int64_t growth_interval)
    : enabled_(enabled),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval) {
  KESTREL_CHECK(init_scale > 0 && growth_factor > 1 && backoff_factor > 0 && backoff_factor < 1 &&
                    growth_interval >= 1,
                "GradScaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and ",
                "growth_interval >= 1; got ", init_scale, ", ", growth_factor, ", ",
                backoff_factor, ", ", growth_interval);
  // The scale lives in float32, as PyTorch's scale tensor.
  state_.scale = static_cast<float>(init_scale);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  return enabled_ ? ops::mul(loss, state_.scale) : loss;
}

void GradScaler::unscale(Optimizer& optimizer) {
  if (!enabled_) return;
  KESTREL_CHECK(!unscaled_, "GradScaler::unscale was already called since the last update()");
  // 1 / scale in double, then rounded to float32 (exact: the scale is a power of two).
  const double inv = static_cast<float>(1.0 / state_.scale);
  found_flag_ = scale_grads(optimizer.parameters(), inv);
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer, const Tensor& skip) {
  if (!enabled_) {
    optimizer.step(skip);
    return true;
  }
  KESTREL_CHECK(!stepped_, "GradScaler::step was already called since the last update()");
  if (!unscaled_) unscale(optimizer);
  stepped_ = true;
  found_inf_ = found_flag_.item() != 0.0;
  if (found_inf_) {
    ++state_.skipped_steps;
    return false;
  }
  optimizer.step(skip);
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  KESTREL_CHECK(stepped_, "GradScaler::update needs a step() first");
  if (found_inf_) {
    state_.scale = static_cast<float>(state_.scale * backoff_factor_);
    state_.growth_tracker = 0;
  } else if (++state_.growth_tracker == growth_interval_) {
    const float grown = static_cast<float>(state_.scale * growth_factor_);
    if (std::isfinite(grown)) state_.scale = grown;
    state_.growth_tracker = 0;
  }
  unscaled_ = stepped_ = found_inf_ = false;
  found_flag_ = Tensor();
}

}  // namespace kestrel::yolo
