#include "yolo/train/train_step.h"

#include "dist/process_group.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/cuda_graph.h"
#include "engine/host_sync.h"
#include "engine/ops/elementwise.h"
#include "engine/stream.h"
#include "kernels/step_flags.h"
#include "kernels/yolo_loss.h"
#include "yolo/train/step_snapshot.h"

namespace kestrel::yolo {

// One captured step: the CUDA graph and the static tensors it reads and writes.
struct TrainStep::Graph {
  Graph(Device device, std::shared_ptr<GraphPool> pool) : graph(device, std::move(pool)) {}
  CudaGraph graph;
  Tensor x, targets;                 // the static inputs the graph reads (shared between graphs)
  StepStatusQueue::Captured status;  // the static outputs it writes
};

Tensor loss_input(const Tensor& t) {
  return t.device().is_cpu() && t.dtype() == DType::BF16 ? t.to(DType::F32) : t;
}

std::vector<Tensor> loss_inputs(std::vector<Tensor> ts) {
  for (Tensor& t : ts) t = loss_input(t);
  return ts;
}

StepLoss DetectionObjective::forward(const Tensor& x, const Tensor& targets, const Tensor& masks) const {
  KESTREL_CHECK(!masks.defined(), "DetectionObjective: detection takes no masks");
  const DeviceLoss loss = loss_.forward(loss_inputs(model_.forward(x)), targets);
  const Tensor items = loss.summary.slice(0, kernels::kSummaryBox, kernels::kSummaryBox + 3);
  return {loss.total, items, items};
}

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
  KESTREL_CHECK((p_.objective || (p_.model && p_.loss)) && p_.optimizer && p_.scaler,
                "TrainStep: the model and loss (or an objective), optimizer and loss scaler are required");
  if (!p_.objective) detection_ = std::make_unique<DetectionObjective>(*p_.model, *p_.loss);
  objective_ = p_.objective ? p_.objective : detection_.get();
  KESTREL_CHECK(rank_.world == 1 || p_.reducer,
                "TrainStep: a job of ", rank_.world, " ranks needs a Reducer");
  KESTREL_CHECK(options_.graphs == GraphMode::Off || device_.is_cuda(),
                "CUDA graphs need a CUDA device; this step runs on ", device_.str(),
                " (use --cuda-graph off)");
}

TrainStep::~TrainStep() = default;

void TrainStep::run(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
                    bool stop_requested, const Tensor& masks) {
  if (graphs_on()) {
    KESTREL_CHECK(!masks.defined(), "TrainStep: CUDA graphs capture detection's step only (no masks); "
                  "train with --cuda-graph off");
    run_graphed(x, targets, batch, step_now, stop_requested);
    return;
  }
  forward_backward(x, targets, batch, step_now, stop_requested, masks);
  if (step_now) optimizer_step();
}

void TrainStep::forward_backward(const Tensor& x, const Tensor& targets, int64_t batch,
                                 bool step_now, bool stop_requested, const Tensor& masks) {
  set_requests(stop_requested, /*replayed=*/false);
  enqueue_forward_backward(x, targets, masks, batch, step_now, /*to_host=*/true);
}

void TrainStep::enqueue_forward_backward(const Tensor& x, const Tensor& targets, const Tensor& masks,
                                         int64_t batch, bool step_now, bool to_host) {
  if (p_.buffers) p_.buffers->broadcast();  // DDP's broadcast_buffers
  const StepLoss loss = objective_->forward(x, targets, masks);
  // The flags' all-reduce is issued before backward's buckets, in the same place on every rank.
  status_.push(batch, loss.components, loss.items, requests_, to_host);
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
  if (p_.ema) p_.ema->update(objective_->model(), window_);
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

void TrainStep::discard_gradients() {
  KESTREL_CHECK(pending_.empty(), "TrainStep::discard_gradients: drain() the batches in flight first");
  if (p_.reducer)
    p_.reducer->zero_grad();
  else
    p_.optimizer->zero_grad();
  set_window_nonfinite(false);
}

void TrainStep::set_window_nonfinite(bool bad) {
  window_.fill_(bad ? 1.0 : 0.0);
  host_window_bad_ = bad;
}

// --- graph mode: the step of each shape captured once into a CUDA graph, then replayed ---------
// (train_step.h says what a replay does, step_graph_policy.h when a step is captured)

namespace {

void mix(uint64_t& h, const void* p) {
  // FNV-1a over the pointer's bytes: the order of the addresses matters, collisions do not
  // (a false match would need the same set of addresses in another arrangement).
  auto v = reinterpret_cast<uintptr_t>(p);
  for (size_t i = 0; i < sizeof v; ++i) {
    h ^= (v >> (8 * i)) & 0xFF;
    h *= 1099511628211ull;
  }
}

void mix_tensor(uint64_t& h, const Tensor& t) { mix(h, t.defined() ? t.data_ptr() : nullptr); }

}  // namespace

// Everything a captured step reads or writes outside its own pool: parameters and their
// gradients, BN buffers, optimizer state, the EMA's state, the step's own device scalars.
uint64_t TrainStep::fingerprint() const {
  uint64_t h = 14695981039346656037ull;
  for (const layers::StateEntry& e : objective_->model().state_entries()) {
    mix_tensor(h, *e.slot);
    if (e.is_parameter) mix_tensor(h, e.slot->grad());
  }
  for (const void* p : p_.optimizer->state_addresses()) mix(h, p);
  if (p_.ema)
    for (const layers::StateEntry& e : p_.ema->module().state_entries()) mix_tensor(h, *e.slot);
  mix_tensor(h, window_);
  mix_tensor(h, requests_);
  return h;
}

void TrainStep::run_graphed(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
                            bool stop_requested) {
  const StepKey key{x.shape(), x.dtype(), targets.size(0), step_now};
  const auto eager = [&] {
    forward_backward(x, targets, batch, step_now, stop_requested);
    if (step_now) optimizer_step();
    policy_.ran_eager(key);
  };
  if (!policy_.disabled_reason().empty()) {  // given up: no fingerprint to take
    eager();
    return;
  }
  const StepGraphPolicy::Action action = policy_.decide(key, fingerprint());
  if (policy_.must_drop()) {
    graphs_.clear();
    graph_pool_.reset();
    policy_.acknowledge_drop();
  }
  switch (action) {
    case StepGraphPolicy::Action::Eager:
      eager();
      return;
    case StepGraphPolicy::Action::Capture:
      if (!capture(key, x, targets)) {
        eager();
        return;
      }
      policy_.captured(key);
      [[fallthrough]];
    case StepGraphPolicy::Action::Replay:
      replay(key, x, targets, batch, stop_requested);
      policy_.replayed();
  }
}

// One static buffer per input shape and dtype, shared by the graphs that read such an input.
Tensor TrainStep::static_buffer(const Tensor& like) {
  Tensor& t = static_buffers_[{like.shape(), like.dtype()}];
  if (!t.defined()) t = Tensor::empty(like.shape(), like.dtype(), device_);
  return t;
}

bool TrainStep::capture(const StepKey& key, const Tensor& x, const Tensor& targets) {
  DeviceGuard device_guard(device_);
  if (!graph_pool_) graph_pool_ = make_graph_pool(device_);
  if (!capture_stream_) capture_stream_ = std::make_unique<Stream>(Stream::create(device_));
  auto g = std::make_unique<Graph>(device_, graph_pool_);
  g->x = static_buffer(x);
  g->targets = static_buffer(targets);
  // The capture stream starts after everything already enqueued (the static buffers' contents
  // are written by each replay, on the current stream, before the graph runs).
  const Stream current = current_stream(device_);
  Event ready(device_);
  ready.record(current);
  ready.wait(*capture_stream_);
  // Nothing of a capture runs on the device; what it leaves on the host is put back on failure.
  StepSnapshot before;
  before.add(status_);
  before.add(*p_.scaler);
  if (p_.reducer) before.add(*p_.reducer);
  before.keep(pending_);
  try {
    StreamGuard on_capture_stream(*capture_stream_);
    // A host read inside a capture is an error the graph would hide: refuse it at once.
    HostSyncGuard no_host_reads(HostSyncGuard::Policy::Throw);
    g->graph.capture_begin(*capture_stream_);
    enqueue_forward_backward(g->x, g->targets, Tensor(), /*batch=*/-1, key.step_now, /*to_host=*/false);
    if (key.step_now) enqueue_optimizer_step();
    if (options_.capture_probe) options_.capture_probe();
    g->graph.capture_end();
  } catch (const std::exception& e) {
    const std::string why = str("capturing the training step (", key.describe(),
                                ") into a CUDA graph failed: ", e.what());
    // Undone also before a fatal error, so that a caller who catches it finds the step as it was.
    g.reset();  // ends the capture if it is still open
    before.restore();
    graphs_.clear();
    graph_pool_.reset();
    if (capture_failure_stops_run(options_.capture_failure_fatal, rank_.world))
      KESTREL_FAIL(why,
                   rank_.world > 1 ? str("; with ", rank_.world, " processes every rank must capture "
                                     "the step at the same batch, so the run stops here")
                                   : std::string(),
                   "; train with --cuda-graph off");
    policy_.give_up(why);
    return false;
  }
  pending_.pop_back();  // the captured batch never ran; its replay queues its own
  g->status = status_.take_captured();
  graphs_[key] = std::move(g);
  // The eager steps' blocks cached in the general pool serve no replay: give them back.
  allocator_empty_cache(device_);
  return true;
}

void TrainStep::replay(const StepKey& key, const Tensor& x, const Tensor& targets, int64_t batch,
                       bool stop_requested) {
  DeviceGuard device_guard(device_);
  Graph& g = *graphs_.at(key);
  // The per-batch inputs the graph reads from device memory, on the current stream.
  g.x.copy_(x);
  g.targets.copy_(targets);
  set_requests(stop_requested, /*replayed=*/true);
  if (key.step_now) p_.optimizer->upload_hyper();
  g.graph.replay(current_stream(device_));
  // The collectives captured into the graph (DDP's buckets, SyncBN) are timed per replay: a
  // stuck peer then fails the run after the group's timeout instead of hanging it.
  if (rank_.group)
    rank_.group->watch_stream(str("collectives of a replayed training step (", key.describe(), ")"));
  status_.push_replayed(batch, g.status);
  pending_.push_back({key.step_now});
}

}  // namespace kestrel::yolo
