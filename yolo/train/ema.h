// The reference's ModelEMA: an exponential moving average of every floating-point entry of a
// model's state (parameters and buffers, BN running statistics included), with the decay ramp
// d = decay * (1 - exp(-updates / tau)) so early updates follow the model closely. Updated after
// each optimizer step by one fused multi-tensor launch; validation and best checkpoints use it.
// The update count lives on the model's device and the kernels compute d from it and advance it
// (not when the step is skipped), so issue_update() launches the same kernels with the same
// arguments every step and can be captured in a CUDA graph.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/optim.h"
#include "layers/module.h"

namespace kestrel::yolo {

class ModelEma {
 public:
  // `ema` is a second instance of the model's architecture (same state entries): it receives a
  // copy of `model`'s whole state (the reference's deepcopy), is put in eval mode, and its
  // parameters stop requiring gradients.
  ModelEma(std::shared_ptr<layers::Module> ema, layers::Module& model, int64_t updates = 0,
           double decay = 0.9999, double tau = 2000.0);

  // Enqueues updates += 1 and ema = d * ema + (1 - d) * model for every floating-point state
  // entry, d = decay_at(updates), computed on the device from the device count. skip
  // (optional): a one-element float32 flag on the model's device, read by the kernels: when
  // non-zero the EMA and its count stay as they were (the host does not wait for it).
  void issue_update(layers::Module& model, const Tensor& skip = Tensor());
  // The same (the EMA has nothing to upload from the host).
  void update(layers::Module& model, const Tensor& skip = Tensor()) { issue_update(model, skip); }
  // The decay of the `updates`-th update (the kernels' own formula, kernels::ema_decay).
  double decay_at(int64_t updates) const;

  layers::Module& module() { return *ema_; }
  const std::shared_ptr<layers::Module>& module_ptr() const { return ema_; }
  // The count read back from the device: a host read (waits for the queued updates on CUDA).
  int64_t updates() const;
  void set_updates(int64_t updates);
  // int64 [1] on the model's device: the count the kernels read and advance.
  const Tensor& device_updates() const { return updates_; }

 private:
  std::shared_ptr<layers::Module> ema_;
  Tensor updates_;
  kernels::EmaRamp ramp_;
};

}  // namespace kestrel::yolo
