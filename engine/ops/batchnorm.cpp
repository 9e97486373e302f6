#include "engine/ops/batchnorm.h"

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "kernels/batchnorm.h"

namespace kestrel::ops {
namespace {

using kernels::BatchNormShape;

const float* f32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

Tensor workspace_for(BatchNormShape s, Device device) {
  return Tensor::empty({kernels::batch_norm_workspace_floats(s)}, DType::F32, device);
}

}  // namespace

namespace bn_steps {

DType param_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

BatchNormShape shape_of(const Tensor& x) { return {x.numel() / x.size(3), x.size(3)}; }

// Packed [count, mean[C], biased var[C]] of x's channels.
Tensor local_moments(const Tensor& x) {
  const BatchNormShape s = shape_of(x);
  Tensor moments = Tensor::empty({kernels::moments_size(s.channels)}, param_dtype(x.dtype()),
                                 x.device());
  launch(
      x.device(), [&] { kernels::batch_norm_stats_cpu(x.dtype(), x.data_ptr(), s, moments.data_ptr()); },
      [&](cudaStream_t stream) {
        kernels::batch_norm_stats_cuda(x.dtype(), x.data_ptr(), s, moments.data<float>(),
                                       workspace_for(s, x.device()).data<float>(), stream);
      });
  return moments;
}

Tensor normalize(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                   const Tensor& bias, double eps) {
  const BatchNormShape s = shape_of(x);
  Tensor y = Tensor::empty_like(x);
  if (x.numel() == 0) return y;
  launch(
      x.device(),
      [&] {
        kernels::batch_norm_forward_cpu(x.dtype(), x.data_ptr(), s, mean.data_ptr(), var.data_ptr(),
                                        weight.data_ptr(), bias.data_ptr(), eps, y.data_ptr());
      },
      [&](cudaStream_t stream) {
        kernels::batch_norm_forward_cuda(x.dtype(), x.data_ptr(), s, f32(mean), f32(var),
                                         f32(weight), f32(bias), eps, y.data_ptr(), stream);
      });
  return y;
}

Tensor merge_moments(const Tensor& gathered, int64_t ranks, int64_t channels) {
  KESTREL_CHECK(ranks >= 1 && gathered.is_contiguous() &&
                    gathered.numel() == ranks * kernels::moments_size(channels),
                "batch_norm merge_moments: expected ", ranks, " packed moments of ", channels,
                " channels (", ranks * kernels::moments_size(channels), " values), got ",
                gathered.describe());
  Tensor merged = Tensor::empty({kernels::moments_size(channels)}, gathered.dtype(),
                                gathered.device());
  launch(
      gathered.device(),
      [&] {
        kernels::batch_norm_merge_moments_cpu(gathered.dtype(), ranks, channels,
                                              gathered.data_ptr(), merged.data_ptr());
      },
      [&](cudaStream_t stream) {
        kernels::batch_norm_merge_moments_cuda(ranks, channels, gathered.data<float>(),
                                               merged.data<float>(), stream);
      });
  return merged;
}

void update_running(const Tensor& moments, double momentum, const Tensor& running_mean,
                    const Tensor& running_var, const Tensor& batches_tracked) {
  const int64_t channels = running_mean.numel();
  if (batches_tracked.defined())
    KESTREL_CHECK(batches_tracked.dtype() == DType::I64 && batches_tracked.numel() == 1 &&
                      batches_tracked.device() == moments.device(),
                  "batch_norm: num_batches_tracked must be one int64 on ", moments.device().str(),
                  " (the statistics' device), got ", batches_tracked.describe());
  int64_t* counter = batches_tracked.defined() ? batches_tracked.data<int64_t>() : nullptr;
  launch(
      moments.device(),
      [&] {
        kernels::batch_norm_update_running_cpu(moments.dtype(), channels, moments.data_ptr(),
                                               momentum, running_mean.data_ptr(),
                                               running_var.data_ptr(), counter);
      },
      [&](cudaStream_t stream) {
        kernels::batch_norm_update_running_cuda(channels, f32(moments), momentum,
                                                running_mean.data<float>(),
                                                running_var.data<float>(), counter, stream);
      });
}

// [sum(dy)[C], sum(dy * xhat)[C]]
Tensor backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& var,
                       double eps) {
  const BatchNormShape s = shape_of(x);
  Tensor sums = Tensor::empty({2 * s.channels}, mean.dtype(), x.device());
  launch(
      x.device(),
      [&] {
        kernels::batch_norm_backward_reduce_cpu(x.dtype(), dy.data_ptr(), x.data_ptr(), s,
                                                mean.data_ptr(), var.data_ptr(), eps,
                                                sums.data_ptr());
      },
      [&](cudaStream_t stream) {
        kernels::batch_norm_backward_reduce_cuda(x.dtype(), dy.data_ptr(), x.data_ptr(), s,
                                                 f32(mean), f32(var), eps, sums.data<float>(),
                                                 workspace_for(s, x.device()).data<float>(),
                                                 stream);
      });
  return sums;
}

// sums and count undefined: eval-mode statistics, constants for the gradient.
Tensor backward_apply(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& var,
                      const Tensor& weight, double eps, const Tensor& sums, const Tensor& count) {
  const BatchNormShape s = shape_of(x);
  Tensor dx = Tensor::empty_like(x);
  if (x.numel() == 0) return dx;
  launch(
      x.device(),
      [&] {
        kernels::batch_norm_backward_apply_cpu(
            x.dtype(), dy.data_ptr(), x.data_ptr(), s, mean.data_ptr(), var.data_ptr(),
            weight.data_ptr(), eps, sums.defined() ? sums.data_ptr() : nullptr,
            count.defined() ? count.data_ptr() : nullptr, dx.data_ptr());
      },
      [&](cudaStream_t stream) {
        kernels::batch_norm_backward_apply_cuda(x.dtype(), dy.data_ptr(), x.data_ptr(), s,
                                                f32(mean), f32(var), f32(weight), eps, f32(sums),
                                                f32(count), dx.data_ptr(), stream);
      });
  return dx;
}

}  // namespace bn_steps

namespace {

using namespace bn_steps;

struct BatchNormBackward : autograd::Node, SavedForward {
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    const Tensor xs = x.unpack(), w = weight.unpack(), mu = mean.unpack(), v = var.unpack();
    const Tensor n = count.unpack();
    const Tensor dy = checked_grad(g[0], xs, "batch_norm");
    const bool need_dx = next_edges[0].fn != nullptr;
    const bool need_params = next_edges[1].fn || next_edges[2].fn;
    const bool training = n.defined();
    // Batch statistics depend on x, so dx needs the sums too; running statistics do not.
    const bool need_sums = need_params || (need_dx && training);
    Tensor sums = need_sums ? backward_reduce(dy, xs, mu, v, eps) : Tensor();
    Tensor dx = need_dx ? backward_apply(dy, xs, mu, v, w, eps, training ? sums : Tensor(), n)
                        : Tensor();
    const ParamGrads d = param_grads(sums, xs.size(3), next_edges[1].fn != nullptr,
                                     next_edges[2].fn != nullptr);
    return {dx, d.weight, d.bias};
  }
  void release_saved() override { release(); }
  std::string name() const override { return "BatchNormBackward"; }
};

void check_param(const Tensor& t, const char* name, const Tensor& x) {
  const DType p = param_dtype(x.dtype());
  KESTREL_CHECK(t.defined(), "batch_norm: ", name, " is undefined; pass a [", x.size(3),
                "] tensor");
  KESTREL_CHECK(t.device() == x.device(), "batch_norm: ", name, " ", t.describe(),
                " is not on the input's device ", x.device().str(), "; move it with .to(device)");
  KESTREL_CHECK(t.dtype() == p, "batch_norm: ", name, " ", t.describe(), " must be ", dtype_name(p),
                " for ", dtype_name(x.dtype()), " input (parameters and statistics stay in master "
                "precision); cast it with .to(DType::", p == DType::F64 ? "F64" : "F32", ")");
  KESTREL_CHECK(t.dim() == 1 && t.size(0) == x.size(3), "batch_norm: ", name, " ", t.describe(),
                " must have shape [", x.size(3), "], one value per channel of ", x.describe());
  KESTREL_CHECK(t.is_contiguous(), "batch_norm: ", name, " ", t.describe(),
                " must be contiguous; call .contiguous() first");
}

}  // namespace

namespace bn_steps {

void check_args(const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& running_mean, const Tensor& running_var, bool training,
                double momentum, double eps) {
  KESTREL_CHECK(x.defined(), "batch_norm: the input is undefined");
  KESTREL_CHECK(x.dim() == 4, "batch_norm: expected an NHWC input [N, H, W, C], got ",
                x.describe(), "; reshape it to 4 dimensions");
  // bfloat16 activations run on the CPU too (its --amp bf16), statistics and parameters float32.
  if (!(x.device().is_cpu() && x.dtype() == DType::BF16)) check_kernel_dtype("batch_norm", x);
  KESTREL_CHECK(x.size(3) > 0, "batch_norm: the input ", x.describe(), " has no channels");
  check_param(weight, "weight", x);
  check_param(bias, "bias", x);
  check_param(running_mean, "running_mean", x);
  check_param(running_var, "running_var", x);
  KESTREL_CHECK(eps > 0, "batch_norm: eps must be positive, got ", eps, " (YOLOv5 uses 1e-3)");
  KESTREL_CHECK(momentum >= 0 && momentum <= 1, "batch_norm: momentum must lie in [0, 1], got ",
                momentum, " (YOLOv5 uses 0.03)");
  KESTREL_CHECK(!training || x.numel() / x.size(3) > 1, "batch_norm: training needs more than one "
                "value per channel to estimate a variance, got ", x.describe(),
                "; use a larger batch or eval mode");
}

void SavedForward::save(const Tensor& x_in, const Tensor& weight_in, const Statistics& st, double eps_in) {
  x = autograd::SavedTensor(x_in);
  weight = autograd::SavedTensor(weight_in);
  mean = autograd::SavedTensor(st.mean);
  var = autograd::SavedTensor(st.var);
  count = autograd::SavedTensor(st.count);
  eps = eps_in;
}

void SavedForward::release() {
  x.release();
  weight.release();
  mean.release();
  var.release();
  count.release();
}

Tensor checked_grad(const Tensor& grad, const Tensor& x, const char* op) {
  Tensor dy = grad.contiguous();
  KESTREL_CHECK(dy.dtype() == x.dtype() && dy.shape() == x.shape(), op, " backward: gradient ",
                dy.describe(), " does not match the input ", x.describe());
  return dy;
}

ParamGrads param_grads(const Tensor& sums, int64_t channels, bool want_weight, bool want_bias) {
  return {want_weight ? sums.slice(0, channels, 2 * channels) : Tensor(),
          want_bias ? sums.slice(0, 0, channels) : Tensor()};
}

Statistics statistics(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                      bool training, double momentum, const Tensor& batches_tracked) {
  if (!training) return {running_mean.clone(), running_var.clone(), Tensor()};
  const Tensor moments = local_moments(x);
  const int64_t c = x.size(3);
  update_running(moments, momentum, running_mean, running_var, batches_tracked);
  return {moments.slice(0, 1, 1 + c), moments.slice(0, 1 + c, 1 + 2 * c), moments.slice(0, 0, 1)};
}

}  // namespace bn_steps

Tensor batch_norm(const Tensor& x_, const Tensor& weight_, const Tensor& bias_,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, const Tensor& batches_tracked) {
  const profiler::Scope timed("BatchNorm", profiler::Phase::Forward);
  bn_steps::check_args(x_, weight_, bias_, running_mean, running_var, training, momentum, eps);
  const Tensor x = x_.contiguous(), weight = weight_.contiguous(), bias = bias_.contiguous();
  const Statistics st = statistics(x, running_mean, running_var, training, momentum,
                                   batches_tracked);
  Tensor y = x.numel() > 0 ? normalize(x, st.mean, st.var, weight, bias, eps)
                           : Tensor::empty_like(x);
  if (auto node = autograd::make_node<BatchNormBackward>({&x_, &weight_, &bias_})) {
    node->save(x, weight, st, eps);
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace kestrel::ops
