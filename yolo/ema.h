// The reference's ModelEMA: an exponential moving average of every floating-point entry of a
// model's state (parameters and buffers, BN running statistics included), with the decay ramp
// d = decay * (1 - exp(-updates / tau)) so early updates follow the model closely. Updated after
// each optimizer step by one fused multi-tensor launch; validation and best checkpoints use it.
#pragma once
#include <cstdint>
#include <memory>

#include "layers/module.h"

namespace kestrel::yolo {

class ModelEma {
 public:
  // `ema` is a second instance of the model's architecture (same state entries): it receives a
  // copy of `model`'s whole state (the reference's deepcopy), is put in eval mode, and its
  // parameters stop requiring gradients.
  ModelEma(std::shared_ptr<layers::Module> ema, layers::Module& model, int64_t updates = 0,
           double decay = 0.9999, double tau = 2000.0);

  // updates += 1, then ema = d * ema + (1 - d) * model for every floating-point state entry.
  // skip (optional): a one-element float32 flag on the model's device, read by the kernel: when
  // non-zero the EMA stays as it was (the host does not wait for it); undo_update() then takes
  // the update count back once the host knows.
  void update(layers::Module& model, const Tensor& skip = Tensor());
  void undo_update() { --updates_; }
  double decay_at(int64_t updates) const;

  layers::Module& module() { return *ema_; }
  const std::shared_ptr<layers::Module>& module_ptr() const { return ema_; }
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }

 private:
  std::shared_ptr<layers::Module> ema_;
  int64_t updates_;
  double decay_, tau_;
};

}  // namespace kestrel::yolo
