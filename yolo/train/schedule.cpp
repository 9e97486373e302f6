#include "yolo/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/error.h"

namespace kestrel::yolo {

double interp(double x, double xp0, double xp1, double fp0, double fp1) {
  if (x < xp0) return fp0;
  if (x >= xp1) return fp1;  // numpy returns the right end exactly at xp1
  const double slope = (fp1 - fp0) / (xp1 - xp0);
  const double offset = slope * (x - xp0);  // two roundings, as numpy's compiled loop
  return offset + fp0;
}

double lr_factor(double x, int64_t epochs, double lrf, bool cos_lr) {
  const double e = static_cast<double>(epochs);
  if (cos_lr) {
    const double half = (1.0 - std::cos(x * std::numbers::pi / e)) / 2.0;
    const double span = half * (lrf - 1.0);
    return span + 1.0;
  }
  const double fall = (1.0 - x / e) * (1.0 - lrf);
  return fall + lrf;
}

int64_t warmup_iterations(double warmup_epochs, int64_t batches_per_epoch) {
  const auto n = static_cast<int64_t>(std::nearbyint(warmup_epochs * batches_per_epoch));
  return std::max<int64_t>(n, 100);
}

LrSchedule::LrSchedule(const Hyp& hyp, int64_t epochs, bool cos_lr, int64_t batch_size,
                       int64_t batches_per_epoch, Optimizer& optimizer)
    : hyp_(hyp),
      epochs_(epochs),
      cos_lr_(cos_lr),
      batch_size_(batch_size),
      nw_(yolo::warmup_iterations(hyp.warmup_epochs, batches_per_epoch)),
      optimizer_(optimizer) {
  KESTREL_CHECK(epochs >= 1, "LrSchedule: epochs must be at least 1, got ", epochs);
  KESTREL_CHECK(batches_per_epoch >= 1, "LrSchedule: an epoch needs at least one batch, got ",
                batches_per_epoch);
  state_.accumulate = nominal_accumulate(batch_size);
  for (size_t j = 0; j < optimizer_.groups().size(); ++j) {
    Optimizer::Rates r = optimizer_.rates(j);
    r.initial_lr = r.lr;
    r.lr = r.initial_lr * lf(0);
    optimizer_.set_rates(j, r);
  }
}

void LrSchedule::warmup(int64_t ni, int64_t epoch) {
  if (ni > nw_) return;
  const double x = static_cast<double>(ni), end = static_cast<double>(nw_);
  const double acc = std::nearbyint(interp(x, 0, end, 1.0, 64.0 / batch_size_));
  state_.accumulate = std::max<int64_t>(1, static_cast<int64_t>(acc));
  for (size_t j = 0; j < optimizer_.groups().size(); ++j) {
    Optimizer::Rates r = optimizer_.rates(j);
    r.lr = interp(x, 0, end, j == 0 ? hyp_.warmup_bias_lr : 0.0, r.initial_lr * lf(epoch));
    if (optimizer_.has_momentum()) r.momentum = interp(x, 0, end, hyp_.warmup_momentum, hyp_.momentum);
    optimizer_.set_rates(j, r);
  }
}

void LrSchedule::epoch_end() {
  ++state_.last_epoch;
  for (size_t j = 0; j < optimizer_.groups().size(); ++j) {
    Optimizer::Rates r = optimizer_.rates(j);
    r.lr = r.initial_lr * lf(static_cast<double>(state_.last_epoch));
    optimizer_.set_rates(j, r);
  }
}

}  // namespace kestrel::yolo
