#include "yolo/train/early_stopping.h"

namespace kestrel::yolo {

bool EarlyStopping::update(int64_t epoch, double fitness) {
  if (fitness >= state_.best_fitness) {  // >=: zero fitness early in training is "no worse"
    state_.best_epoch = epoch;
    state_.best_fitness = fitness;
  }
  const int64_t delta = epoch - state_.best_epoch;
  possible_stop_ = !disabled() && delta >= patience_ - 1;
  return !disabled() && delta >= patience_;
}

}  // namespace kestrel::yolo
