#include "yolo/train/ema.h"

#include "engine/autograd.h"
#include "engine/ops/launch.h"
#include "yolo/train/optimizer.h"

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
    : ema_(std::move(ema)), ramp_{decay, tau} {
  KESTREL_CHECK(ema_ != nullptr, "ModelEma: no EMA module given");
  KESTREL_CHECK(ema_.get() != &model, "ModelEma: the EMA needs its own copy of the model");
  KESTREL_CHECK(tau > 0, "ModelEma: tau must be positive, got ", tau);
  autograd::NoGradGuard no_grad;
  const std::vector<layers::StateEntry> e = ema_->state_entries(), m = model.state_entries();
  check_same_layout(e, m);
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i].slot->device() != m[i].slot->device()) *e[i].slot = Tensor::empty_like(*m[i].slot);
    e[i].slot->copy_(*m[i].slot);
    if (e[i].is_parameter) e[i].slot->set_requires_grad(false);
  }
  ema_->train(false);
  updates_ = Tensor::zeros({1}, DType::I64, m.empty() ? Device::cpu() : m.front().slot->device());
  set_updates(updates);
}

double ModelEma::decay_at(int64_t updates) const { return kernels::ema_decay(ramp_, updates); }

int64_t ModelEma::updates() const { return updates_.to_vector<int64_t>()[0]; }

void ModelEma::set_updates(int64_t updates) {
  KESTREL_CHECK(updates >= 0, "ModelEma: the update count is never negative, got ", updates);
  updates_.copy_(Tensor::from_vector<int64_t>({updates}, {1}));
}

void ModelEma::issue_update(layers::Module& model, const Tensor& skip) {
  autograd::NoGradGuard no_grad;
  const std::vector<layers::StateEntry> e = ema_->state_entries(), m = model.state_entries();
  check_same_layout(e, m);
  std::vector<std::vector<Tensor>> cols(2);
  for (size_t i = 0; i < e.size(); ++i) {
    if (!is_floating(e[i].slot->dtype())) continue;
    cols[0].push_back(*e[i].slot);
    cols[1].push_back(m[i].slot->detach());
  }
  const kernels::TensorList list = make_tensor_list(cols, "EMA update");
  const Device device = updates_.device();
  // An empty list has no dtype; the kernels then only advance the count.
  const DType dtype = cols[0].empty() ? DType::F32 : cols[0].front().dtype();
  KESTREL_CHECK(cols[0].empty() || cols[0].front().device() == device,
                "ModelEma::update: the EMA's state is on ", cols[0].front().device().str(),
                " but its update count on ", device.str(), "; keep the model where the EMA was built");
  KESTREL_CHECK(!skip.defined() || (skip.numel() == 1 && skip.dtype() == DType::F32 &&
                                    skip.device() == device),
                "ModelEma::update: the skip flag must be a one-element float32 tensor on ",
                device.str(), ", got ", skip.describe());
  const float* skip_flag = skip.defined() ? skip.data<float>() : nullptr;
  int64_t* count = updates_.data<int64_t>();
  ops::launch(
      device, [&] { kernels::ema_update_cpu(dtype, list, ramp_, count, skip_flag); },
      [&](cudaStream_t s) { kernels::ema_update_cuda(dtype, list, ramp_, count, s, skip_flag); });
}

}  // namespace kestrel::yolo
