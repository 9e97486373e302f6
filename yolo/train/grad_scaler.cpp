#include "yolo/train/grad_scaler.h"

#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/launch.h"

namespace kestrel::yolo {
namespace {

const float* flag_ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

GradScaler::GradScaler(bool enabled, double init_scale, double growth_factor,
                       double backoff_factor, int64_t growth_interval)
    : enabled_(enabled),
      schedule_{growth_factor, backoff_factor, static_cast<int32_t>(growth_interval)} {
  KESTREL_CHECK(init_scale > 0 && growth_factor > 1 && backoff_factor > 0 && backoff_factor < 1 &&
                    growth_interval >= 1 &&
                    growth_interval <= std::numeric_limits<int32_t>::max(),
                "GradScaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and ",
                "1 <= growth_interval < 2^31; got ", init_scale, ", ", growth_factor, ", ",
                backoff_factor, ", ", growth_interval);
  // The scale lives in float32, as PyTorch's scale tensor.
  host_.scale = static_cast<float>(init_scale);
}

void GradScaler::place(Device device) {
  if (scale_.defined()) {
    KESTREL_CHECK(scale_.device() == device, "GradScaler: the loss scale lives on ",
                  scale_.device().str(), " but this call works on ", device.str(),
                  "; use one GradScaler per device, with the model and its loss on that device");
    return;
  }
  scale_ = Tensor::full({}, host_.scale, DType::F32, device);
  tracker_ = Tensor::full({}, static_cast<double>(host_.growth_tracker), DType::I32, device);
  skipped_ = Tensor::full({}, static_cast<double>(host_.skipped_steps), DType::I64, device);
  found_inf_ = Tensor::zeros({1}, DType::F32, device);
  skip_ = Tensor::zeros({1}, DType::F32, device);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!enabled_) return loss;
  KESTREL_CHECK(loss.defined() && (loss.dtype() == DType::F32 || loss.dtype() == DType::F64),
                "GradScaler::scale: the loss must be float32 (float64 on the CPU), got ",
                loss.defined() ? loss.describe() : std::string("an undefined tensor"),
                "; a scaled float16 loss would overflow, so cast it with .to(DType::F32) first");
  place(loss.device());
  Tensor factor = loss.dtype() == DType::F32 ? scale_ : scale_.to(loss.dtype());
  if (loss.dim() != 0)  // the one scale broadcast over the loss's elements
    factor = make_view(factor, loss.shape(), Shape(static_cast<size_t>(loss.dim()), 0), 0);
  return ops::mul(loss, factor);
}

void GradScaler::unscale(Optimizer& optimizer) {
  if (!enabled_) return;
  KESTREL_CHECK(!unscaled_, "GradScaler::unscale was already called since the last update()");
  const std::vector<Tensor> params = optimizer.parameters();
  place(params.empty() ? Device::cpu() : params.front().device());
  unscaled_ = true;
  const std::vector<Tensor> grads = gradients_of(params);
  if (grads.empty()) return;
  const kernels::TensorList list = make_tensor_list({grads}, "gradient unscaling");
  const Device at = grads.front().device();
  const DType dtype = grads.front().dtype();
  place(at);
  ops::launch(
      at, [&] { kernels::unscale_cpu(dtype, list, scale_.data<float>(), found_inf_.data<float>()); },
      [&](cudaStream_t s) {
        kernels::unscale_cuda(dtype, list, scale_.data<float>(), found_inf_.data<float>(), s);
      });
}

bool GradScaler::step(Optimizer& optimizer, const Tensor& skip) {
  if (!enabled_) {
    optimizer.step(skip);
    return true;
  }
  KESTREL_CHECK(!stepped_, "GradScaler::step was already called since the last update()");
  if (!unscaled_) unscale(optimizer);
  if (skip.defined())
    KESTREL_CHECK(skip.numel() == 1 && skip.dtype() == DType::F32 && skip.is_contiguous() &&
                      skip.device() == skip_.device(),
                  "GradScaler::step: the skip flag must be a one-element float32 tensor on ",
                  skip_.device().str(), " (the parameters' device), got ", skip.describe());
  const Device at = skip_.device();
  ops::launch(
      at, [&] { kernels::combine_skip_cpu(flag_ptr(skip), found_inf_.data<float>(), skip_.data<float>()); },
      [&](cudaStream_t s) {
        kernels::combine_skip_cuda(flag_ptr(skip), found_inf_.data<float>(), skip_.data<float>(), s);
      });
  stepped_ = true;
  optimizer.step(skip_);
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  KESTREL_CHECK(stepped_, "GradScaler::update needs a step() first");
  const Device at = scale_.device();
  ops::launch(
      at,
      [&] {
        kernels::update_scale_cpu(scale_.data<float>(), tracker_.data<int32_t>(),
                                  skipped_.data<int64_t>(), found_inf_.data<float>(), schedule_);
      },
      [&](cudaStream_t s) {
        kernels::update_scale_cuda(scale_.data<float>(), tracker_.data<int32_t>(),
                                   skipped_.data<int64_t>(), found_inf_.data<float>(), schedule_,
                                   s);
      });
  unscaled_ = stepped_ = false;
}

GradScaler::State GradScaler::state() const {
  if (!scale_.defined()) return host_;
  return {scale_.item(), static_cast<int64_t>(tracker_.item()),
          static_cast<int64_t>(skipped_.item())};
}

void GradScaler::load_state(const State& s) {
  KESTREL_CHECK(std::isfinite(s.scale) && s.scale > 0 && s.growth_tracker >= 0 &&
                    s.growth_tracker <= std::numeric_limits<int32_t>::max() &&
                    s.skipped_steps >= 0,
                "GradScaler::load_state: needs a finite scale > 0 and non-negative counts (the "
                "growth tracker below 2^31); got scale ",
                s.scale, ", growth_tracker ", s.growth_tracker, ", skipped_steps ",
                s.skipped_steps, ". Is the checkpoint's \"scaler\" entry damaged?");
  host_ = s;
  if (!enabled_) return;
  host_.scale = static_cast<float>(s.scale);
  if (!scale_.defined()) return;
  scale_.fill_(host_.scale);
  tracker_.fill_(static_cast<double>(host_.growth_tracker));
  skipped_.fill_(static_cast<double>(host_.skipped_steps));
}

}  // namespace kestrel::yolo
