#include "yolo/ema.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "yolo/optimizer.h"

namespace kestrel::yolo {
namespace {

// The two models' entries side by side, checked to describe the same architecture.
void check_same_layout(const std::vector<layers::StateEntry>& ema,
                       const std::vector<layers::StateEntry>& model) {
  KESTREL_CHECK(ema.size() == model.size(), "ModelEma: the EMA module has ", ema.size(),
                " state entries and the model ", model.size(),
                "; build the EMA from the same architecture as the model");
  for (size_t i = 0; i < ema.size(); ++i)
    KESTREL_CHECK(ema[i].name == model[i].name &&
                      ema[i].slot->shape() == model[i].slot->shape() &&
                      ema[i].slot->dtype() == model[i].slot->dtype(),
                  "ModelEma: state entry ", i, " is ", ema[i].name, " ",
                  ema[i].slot->describe(), " in the EMA but ", model[i].name, " ",
                  model[i].slot->describe(), " in the model");
}

}  // namespace

ModelEma::ModelEma(std::shared_ptr<layers::Module> ema, layers::Module& model, int64_t updates,
                   double decay, double tau)
    : ema_(std::move(ema)), updates_(updates), decay_(decay), tau_(tau) {
  KESTREL_CHECK(ema_ != nullptr, "ModelEma: no EMA module given");
  KESTREL_CHECK(ema_.get() != &model, "ModelEma: the EMA needs its own copy of the model");
  autograd::NoGradGuard no_grad;
  const std::vector<layers::StateEntry> e = ema_->state_entries(), m = model.state_entries();
  check_same_layout(e, m);
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i].slot->device() != m[i].slot->device()) *e[i].slot = Tensor::empty_like(*m[i].slot);
    e[i].slot->copy_(*m[i].slot);
    if (e[i].is_parameter) e[i].slot->set_requires_grad(false);
  }
  ema_->train(false);
}

double ModelEma::decay_at(int64_t updates) const {
  return decay_ * (1.0 - std::exp(-static_cast<double>(updates) / tau_));
}

void ModelEma::update(layers::Module& model, const Tensor& skip) {
  autograd::NoGradGuard no_grad;
  ++updates_;
  const double d = decay_at(updates_);
  const std::vector<layers::StateEntry> e = ema_->state_entries(), m = model.state_entries();
  check_same_layout(e, m);
  std::vector<std::vector<Tensor>> cols(2);
  for (size_t i = 0; i < e.size(); ++i) {
    if (!is_floating(e[i].slot->dtype())) continue;
    cols[0].push_back(*e[i].slot);
    cols[1].push_back(m[i].slot->detach());
  }
  if (cols[0].empty()) return;
  const kernels::TensorList list = make_tensor_list(cols, "EMA update");
  const Tensor& first = cols[0].front();
  KESTREL_CHECK(!skip.defined() || (skip.numel() == 1 && skip.dtype() == DType::F32 &&
                                    skip.device() == first.device()),
                "ModelEma::update: the skip flag must be a one-element float32 tensor on ",
                first.device().str(), ", got ", skip.describe());
  const float* skip_flag = skip.defined() ? skip.data<float>() : nullptr;
  if (first.device().is_cuda()) {
    DeviceGuard guard(first.device());  // the launch goes to the current device
    kernels::ema_update_cuda(first.dtype(), list, d, current_stream(first.device()).handle(),
                             skip_flag);
  } else {
    kernels::ema_update_cpu(first.dtype(), list, d, skip_flag);
  }
}

}  // namespace kestrel::yolo
