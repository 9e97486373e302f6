// Parameter groups and optimizers as the reference's smart_optimizer builds them (SGD with Nesterov
// momentum, Adam, AdamW, and classification's RMSProp, over three groups), gradient clipping by
// global norm, and the Tensor-level front of the fused multi-tensor kernels (kernels/optim.h) that
// the EMA and the loss scaler use too. Master weights, gradients and optimizer state are float32
// (float64 on the CPU for tests).
//
// Everything a step reads that changes between steps lives on the parameters' device: each
// group's lr and momentum / beta1 (a float64 tensor that upload_hyper() fills from the host
// groups), Adam's and RMSProp's per-parameter step counts and the skip flag. issue_step()
// therefore launches the same kernels with the same arguments every step, and can be captured in
// a CUDA graph.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "kernels/optim.h"
#include "layers/module.h"

namespace kestrel::yolo {

enum class OptimizerKind { SGD, Adam, AdamW, RMSProp };
// "SGD", "Adam", "AdamW" or "RMSProp" (the reference's smart_optimizer names); anything else is
// refused. Each task's CLI narrows this to its own --optimizer choices: detection's train.py
// accepts SGD, Adam and AdamW only (yolo/train/train_options.cpp), classify/train.py all four.
// RMSProp is torch.optim.RMSprop(lr, momentum, alpha=0.99, eps=1e-8, centered=False) with the
// group's weight decay added to the gradient.
OptimizerKind parse_optimizer_kind(const std::string& name);
const char* optimizer_kind_name(OptimizerKind kind);

struct Parameter {
  std::string name;  // the reference's state-dict name ("model.0.conv.weight")
  Tensor tensor;
  bool ohwi_conv_weight = false;  // OHWI in memory, OIHW in files
};

struct ParamGroup {
  std::string label;  // "bias", "weight(decay)", "weight(no decay)"
  std::vector<Parameter> params;
  double lr = 0, initial_lr = 0;
  double momentum = 0;  // SGD's and RMSProp's momentum; Adam's beta1 (which no warmup moves)
  double weight_decay = 0;
};

// The reference's groups, in its param_groups order: 0 biases (no decay), 1 weights with decay,
// 2 batch-norm weights (no decay). A parameter named "bias" is a bias, the weight of a BatchNorm2d
// a BN weight, everything else a decayed weight; within a group, model order.
std::vector<ParamGroup> make_param_groups(layers::Module& model, double lr, double momentum,
                                          double weight_decay);

// The reference's accumulate = max(round(64 / batch_size), 1) (halves to even, as Python's round).
int64_t nominal_accumulate(int64_t batch_size);
// weight_decay * batch_size * accumulate / 64.
double scaled_weight_decay(double weight_decay, int64_t batch_size);

class Optimizer {
 public:
  // State (momentum buffers, Adam moments, RMSProp's square averages) starts at zero, which is
  // PyTorch's first step exactly.
  Optimizer(OptimizerKind kind, std::vector<ParamGroup> groups);

  OptimizerKind kind() const { return kind_; }
  // The reference's `'momentum' in group`: SGD's and RMSProp's groups have one, which the warmup
  // moves; Adam's (betas) do not.
  bool has_momentum() const {
    return kind_ == OptimizerKind::SGD || kind_ == OptimizerKind::RMSProp;
  }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // A group's rates, as the schedule and a resumed checkpoint set them. The kernels see a change
  // at the next upload_hyper().
  struct Rates {
    double lr = 0, initial_lr = 0, momentum = 0, weight_decay = 0;
  };
  Rates rates(size_t group) const;
  void set_rates(size_t group, const Rates& rates);
  std::vector<Tensor> parameters() const;

  // Copies every group's lr and momentum (ParamGroup, the values the schedule writes) into the
  // device tensor the kernels read. CUDA: an asynchronous copy on the current stream from a
  // pinned buffer (no host wait); CPU: a plain write.
  void upload_hyper();
  // Enqueues one update of every parameter that has a gradient (one fused launch per group on
  // CUDA, and for Adam and RMSProp one small launch advancing the group's step counts), reading
  // lr and momentum from the device tensor as last uploaded and the step counts from the device.
  // Parameters without a gradient are left alone, counts included. Weight decay (fixed for a
  // run) is a kernel argument. No device allocation (gradients are contiguous, as backward
  // leaves them), host wait or host-to-device copy: capturable in a CUDA graph.
  // skip (optional): a one-element float32 flag on the parameters' device, read by the kernels
  // when they run: non-zero leaves parameters, state and step counts unchanged.
  void issue_step(const Tensor& skip = Tensor());
  // upload_hyper(), then issue_step(skip). During a CUDA graph capture on the current stream,
  // issue_step(skip) only: the replaying code uploads before each replay.
  void step(const Tensor& skip = Tensor());
  // Zeroes every existing gradient in place (one multi-tensor launch per device and dtype),
  // keeping its memory for the next backward to accumulate into; undefined gradients stay
  // undefined. The reference's torch 1.x zero_grad() (set_to_none=False) does the same.
  void zero_grad() { zero_grad(false); }
  // set_to_none: drop every gradient instead (the next backward allocates them anew).
  void zero_grad(bool set_to_none);

  // float64 [groups, 2] on the parameters' device: each group's (lr, momentum) as last uploaded,
  // laid out as kernels::GroupHyper.
  const Tensor& device_hyper() const { return hyper_; }

  // The live state tensors as "<param name>.<slot>": momentum_buffer (SGD); exp_avg, exp_avg_sq
  // and step (an int64 0-d view of the parameter's device-resident step count) (Adam, AdamW);
  // square_avg, momentum_buffer and step (RMSProp; the buffer is listed, and stays zero, even at
  // momentum 0, where PyTorch keeps none).
  // Conv-weight-shaped slots are OIHW views, like weights in files; copying into a returned
  // tensor restores that state.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // The memory a captured optimizer step uses besides parameters and gradients: every state slot,
  // the step counts and the uploaded hyperparameters, in a fixed order (a CUDA graph's address
  // check, before every batch: no names, no views).
  std::vector<const void*> state_addresses() const;

  // "SGD(lr=0.01) with parameter groups 57 weight(decay=0.0), 60 weight(decay=0.0005), 60 bias"
  std::string describe() const;

 private:
  // The group's parameters that have a gradient, as the multi-tensor kernels' columns: parameter,
  // gradient, then `state_columns` of state (a, b); `index` is each one's place in the group.
  struct Stepping {
    std::vector<std::vector<Tensor>> cols;
    std::vector<size_t> index;
  };
  Stepping stepping(size_t group, int state_columns) const;
  void issue_sgd(size_t group, const float* skip);
  void issue_adam(size_t group, const float* skip);
  void issue_rmsprop(size_t group, const float* skip);
  // The group's parameters with a gradient as a depth-4 list with their step counts (Adam,
  // RMSProp), and the list's device and dtype (meaningful when it is not empty).
  struct Counted {
    kernels::TensorList list;
    Device device;
    DType dtype;
  };
  Counted counted_list(size_t group, const char* what) const;
  Tensor free_staging();

  struct Slots {
    Tensor a, b;  // momentum buffer; or exp_avg, exp_avg_sq; or square_avg, momentum buffer
  };
  OptimizerKind kind_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<Slots>> state_;  // [group][param]
  Device device_;                          // the parameters' (CPU when there are none)
  Tensor hyper_;                           // float64 [groups, 2] on device_
  std::vector<Tensor> counts_;             // Adam, RMSProp: int64 [params] per group on device_
  std::vector<Tensor> staging_;            // CUDA: pinned float64 [groups, 2] upload buffers
};

// make_param_groups + Optimizer, as the reference's smart_optimizer(model, name, lr, momentum, decay).
Optimizer smart_optimizer(layers::Module& model, OptimizerKind kind, double lr, double momentum,
                          double weight_decay);

// --- multi-tensor helpers ------------------------------------------------------------------------
// Builds the kernel list of columns[d][k] (tensor k's d-th buffer), checking that every tensor is
// contiguous, of one dtype and device, and that each row's buffers have the same element count.
kernels::TensorList make_tensor_list(const std::vector<std::vector<Tensor>>& columns,
                                     const char* what);
// The parameters' gradients (made contiguous in place where needed); parameters without one are
// skipped.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& params);
// Euclidean norm over all gradients of `params`: a 0-d tensor on their device (float32, or
// float64 for float64 gradients), computed deterministically in double.
Tensor grad_norm(const std::vector<Tensor>& params);
// torch.nn.utils.clip_grad_norm_: scales every gradient by min(max_norm / (norm + 1e-6), 1) and
// returns the norm before clipping, without a host synchronisation on CUDA.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// Every gradient *= factor. Returns a 0-d float32 flag on the gradients' device: 1 when any
// gradient held inf or NaN before scaling, else 0.
Tensor scale_grads(const std::vector<Tensor>& params, double factor);

}  // namespace kestrel::yolo
