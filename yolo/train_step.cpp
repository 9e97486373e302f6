#include "yolo/train_step.h"

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "kernels/step_flags.h"
#include "yolo/step_graph.h"

namespace kestrel::yolo {

TrainStep::TrainStep(TrainStepParts parts, const RankInfo& rank, Device device,
                     TrainStepOptions options)
    : p_(parts),
      rank_(rank),
      device_(device),
      options_(options),
      status_(rank, device),
      window_(Tensor::zeros({1}, DType::F32, device)),
      requests_(Tensor::zeros({kernels::kStepRequests}, DType::F32, device)),
      policy_(options.graph_warmup_steps) {
  KESTREL_CHECK(p_.model && p_.loss && p_.optimizer && p_.scaler,
                "TrainStep: the model, loss, optimizer and loss scaler are required");
  KESTREL_CHECK(rank_.world == 1 || p_.reducer,
                "TrainStep: a job of ", rank_.world, " ranks needs a Reducer");
  KESTREL_CHECK(options_.graphs == GraphMode::Off || device_.is_cuda(),
                "CUDA graphs need a CUDA device; this step runs on ", device_.str(),
                " (use --cuda-graph off)");
}

TrainStep::~TrainStep() = default;

void TrainStep::run(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
                    bool stop_requested) {
  if (graphs_on()) {
    run_graphed(x, targets, batch, step_now, stop_requested);
    return;
  }
  forward_backward(x, targets, batch, step_now, stop_requested);
  if (step_now) optimizer_step();
}

void TrainStep::forward_backward(const Tensor& x, const Tensor& targets, int64_t batch,
                                 bool step_now, bool stop_requested) {
  set_requests(stop_requested, /*replayed=*/false);
  enqueue_forward_backward(x, targets, batch, step_now, /*to_host=*/true);
}

void TrainStep::enqueue_forward_backward(const Tensor& x, const Tensor& targets, int64_t batch,
                                         bool step_now, bool to_host) {
  if (p_.buffers) p_.buffers->broadcast();  // DDP's broadcast_buffers
  const std::vector<Tensor> preds = p_.model->forward(x);
  const DeviceLoss loss = p_.loss->forward(preds, targets);
  // The flags' all-reduce is issued before backward's buckets, in the same place on every rank.
  status_.push(batch, loss.summary, requests_, to_host);
  pending_.push_back({step_now});
  // DDP averages the ranks' gradients; the reference multiplies the loss by the world size (and
  // by 4 with --quad).
  const double factor = static_cast<double>(rank_.world) * options_.loss_factor;
  const Tensor total = factor != 1.0 ? ops::mul(loss.total, factor) : loss.total;
  if (p_.reducer) {
    p_.reducer->set_sync(step_now);
    p_.reducer->prepare_for_backward();
  }
  p_.scaler->scale(total).backward();
  if (p_.reducer) p_.reducer->finalize();
  autograd::NoGradGuard no_grad;
  ops::add_(window_, status_.newest_flags().slice(0, kernels::kFlagNonFinite,
                                                  kernels::kFlagNonFinite + 1));
}

// Host bookkeeping for one status, in batch order: the host learns whether the open window
// holds a non-finite loss (checkpoints record it); the device already acted on it.
BatchStatus TrainStep::settle(BatchStatus s) {
  check_ranks_ran_alike(s, rank_.world);
  const Pending done = pending_.front();
  pending_.pop_front();
  host_window_bad_ = host_window_bad_ || s.nonfinite_ranks > 0;
  if (done.ends_window) host_window_bad_ = false;
  return s;
}

std::vector<BatchStatus> TrainStep::take_previous() {
  std::vector<BatchStatus> out;
  while (status_.pending() > 1) out.push_back(settle(status_.pop()));
  return out;
}

std::vector<BatchStatus> TrainStep::drain() {
  std::vector<BatchStatus> out = take_previous();
  if (status_.pending() > 0) out.push_back(settle(status_.pop()));
  return out;
}

void TrainStep::optimizer_step() {
  KESTREL_CHECK(!pending_.empty() && pending_.back().ends_window,
                "TrainStep::optimizer_step: the last forward_backward was not told that a step "
                "follows (step_now)");
  enqueue_optimizer_step();
}

void TrainStep::enqueue_optimizer_step() {
  p_.scaler->unscale(*p_.optimizer);
  clip_grad_norm(p_.optimizer->parameters(), 10.0);
  p_.scaler->step(*p_.optimizer, window_);
  p_.scaler->update();
  if (p_.reducer)
    p_.reducer->zero_grad();
  else
    p_.optimizer->zero_grad();
  if (p_.ema) p_.ema->update(*p_.model, window_);
  window_.zero_();
}

// The values the step's flags kernel reads from device memory when it runs (eagerly, or in a
// replay of the graph that captured it).
void TrainStep::set_requests(bool stop_requested, bool replayed) {
  requests_.slice(0, kernels::kRequestStop, kernels::kRequestStop + 1)
      .fill_(stop_requested ? 1.0 : 0.0);
  requests_.slice(0, kernels::kRequestReplayed, kernels::kRequestReplayed + 1)
      .fill_(replayed ? 1.0 : 0.0);
}

void TrainStep::set_window_nonfinite(bool bad) {
  window_.fill_(bad ? 1.0 : 0.0);
  host_window_bad_ = bad;
}

}  // namespace kestrel::yolo
