#include "dist/sync_batchnorm.h"

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"

namespace kestrel::dist {
namespace {

using namespace ops::bn_steps;

// The ranks' moments gathered and merged into one packed buffer covering the global batch.
Tensor global_moments(const Tensor& local, int64_t channels, ProcessGroup& group) {
  const int64_t ranks = group.size();
  Tensor gathered = Tensor::empty({ranks * local.numel()}, local.dtype(), local.device());
  group.all_gather(gathered, local)->wait();
  return merge_moments(gathered, ranks, channels);
}

struct SyncBatchNormBackward : autograd::Node {
  autograd::SavedTensor x, weight, moments;  // moments: the merged, global ones
  double eps = 0;
  std::shared_ptr<ProcessGroup> group;

  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    const Tensor xs = x.unpack(), w = weight.unpack(), m = moments.unpack();
    const int64_t c = xs.size(3);
    const Tensor count = m.slice(0, 0, 1), mean = m.slice(0, 1, 1 + c),
                 var = m.slice(0, 1 + c, 1 + 2 * c);
    const Tensor dy = g[0].contiguous();
    KESTREL_CHECK(dy.dtype() == xs.dtype() && dy.shape() == xs.shape(),
                  "sync_batch_norm backward: gradient ", dy.describe(),
                  " does not match the input ", xs.describe());
    const Tensor local = backward_reduce(dy, xs, mean, var, eps);
    Tensor dx;
    // Every rank takes this branch alike (same graph), so the all_reduce pairs up across ranks.
    if (next_edges[0].fn) {
      const Tensor global = local.clone();
      group->all_reduce(global, ReduceOp::Sum)->wait();
      dx = backward_apply(dy, xs, mean, var, w, eps, global, count);
    }
    Tensor dweight = next_edges[1].fn ? local.slice(0, c, 2 * c) : Tensor();
    Tensor dbias = next_edges[2].fn ? local.slice(0, 0, c) : Tensor();
    return {dx, dweight, dbias};
  }
  void release_saved() override {
    x.release();
    weight.release();
    moments.release();
  }
  std::string name() const override { return "SyncBatchNormBackward"; }
};

}  // namespace

Tensor sync_batch_norm(const Tensor& x_, const Tensor& weight_, const Tensor& bias_,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps, const std::shared_ptr<ProcessGroup>& group,
                       const Tensor& batches_tracked) {
  KESTREL_CHECK(group, "sync_batch_norm: no process group");
  if (!training || group->size() == 1)
    return ops::batch_norm(x_, weight_, bias_, running_mean, running_var, training, momentum, eps,
                           batches_tracked);
  KESTREL_CHECK(x_.defined() && x_.dim() == 4,
                "sync_batch_norm: expected an NHWC input "
                "[N, H, W, C], got ",
                x_.defined() ? x_.describe() : std::string("undefined"));
  KESTREL_CHECK(
      weight_.defined() && bias_.defined() && running_mean.defined() && running_var.defined(),
      "sync_batch_norm: weight, bias, running_mean and running_var must be defined");
  const int64_t c = x_.size(3);
  const DType p = param_dtype(x_.dtype());
  for (const Tensor* t : {&weight_, &bias_, &running_mean, &running_var})
    KESTREL_CHECK(t->dtype() == p && t->device() == x_.device() && t->dim() == 1 &&
                      t->size(0) == c && t->is_contiguous(),
                  "sync_batch_norm: parameter/statistic ", t->describe(), " must be a contiguous ",
                  dtype_name(p), " [", c, "] tensor on ", x_.device().str(), " for input ",
                  x_.describe());
  KESTREL_CHECK(eps > 0 && momentum >= 0 && momentum <= 1,
                "sync_batch_norm: eps must be > 0 and "
                "momentum in [0, 1], got eps ",
                eps, ", momentum ", momentum);
  const Tensor x = x_.contiguous(), weight = weight_.contiguous(), bias = bias_.contiguous();
  const int64_t rows = shape_of(x).rows;
  // On CUDA the global count is not read back (that would stall the host at every layer): there
  // a rank with data must have more than one row.
  if (x.device().is_cuda())
    KESTREL_CHECK(rows != 1,
                  "sync_batch_norm: training needs more than one value per channel, "
                  "got ",
                  x.describe(), " on rank ", group->rank(), "; use a larger batch");
  const Tensor moments = global_moments(local_moments(x), c, *group);
  if (x.device().is_cpu())
    KESTREL_CHECK(moments.to_double_vector()[0] > 1,
                  "sync_batch_norm: training needs more than one value per channel across all "
                  "ranks, got ",
                  x.describe(), " on rank ", group->rank(), "; use a larger batch or eval mode");
  const Tensor mean = moments.slice(0, 1, 1 + c), var = moments.slice(0, 1 + c, 1 + 2 * c);
  update_running(moments, momentum, running_mean, running_var, batches_tracked);
  Tensor y = normalize(x, mean, var, weight, bias, eps);
  if (auto node = autograd::make_node<SyncBatchNormBackward>({&x_, &weight_, &bias_})) {
    node->x = autograd::SavedTensor(x);
    node->weight = autograd::SavedTensor(weight);
    node->moments = autograd::SavedTensor(moments);
    node->eps = eps;
    node->group = group;
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace kestrel::dist
