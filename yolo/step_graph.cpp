// TrainStep's graph mode: the step of each shape captured once into a CUDA graph, then replayed.
// See train_step.h for what a replay does and step_graph_policy.h for when a step is captured.
#include "yolo/step_graph.h"

#include "dist/process_group.h"
#include "engine/allocator.h"
#include "engine/host_sync.h"
#include "engine/stream.h"
#include "layers/conv.h"

namespace kestrel::yolo {
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

// The model's host-resident counters (CPU int64 scalars) and their values now.
std::vector<std::pair<Tensor, int64_t>> host_counters(layers::Module& model) {
  std::vector<std::pair<Tensor, int64_t>> out;
  model.visit([&](layers::Module& m) {
    if (auto* bn = dynamic_cast<layers::BatchNorm2d*>(&m))
      out.emplace_back(bn->num_batches_tracked, bn->num_batches_tracked.data<int64_t>()[0]);
  });
  return out;
}

}  // namespace

// Everything a captured step reads or writes outside its own pool: parameters and their
// gradients, BN buffers, optimizer state, the EMA's state, the step's own device scalars.
uint64_t TrainStep::fingerprint() const {
  uint64_t h = 14695981039346656037ull;
  for (const layers::StateEntry& e : p_.model->state_entries()) {
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
  std::vector<std::pair<Tensor, int64_t>> counters = host_counters(*p_.model);
  const Stream current = current_stream(device_);
  Event ready(device_);
  ready.record(current);
  ready.wait(*capture_stream_);
  const size_t pending_before = pending_.size();
  try {
    StreamGuard on_capture_stream(*capture_stream_);
    // A host read inside a capture is an error the graph would hide: refuse it at once.
    HostSyncGuard no_host_reads(HostSyncGuard::Policy::Throw);
    g->graph.capture_begin(*capture_stream_);
    enqueue_forward_backward(g->x, g->targets, /*batch=*/-1, key.step_now, /*to_host=*/false);
    if (key.step_now) enqueue_optimizer_step();
    if (options_.capture_probe) options_.capture_probe();
    g->graph.capture_end();
  } catch (const std::exception& e) {
    const std::string why = str("capturing the training step (", key.describe(),
                                ") into a CUDA graph failed: ", e.what());
    // Nothing of the capture ran on the device; undo what it left on the host (also before a
    // fatal error, so that a caller who catches it finds the step as it was).
    g.reset();  // ends the capture if it is still open
    status_.discard_captured();
    pending_.resize(pending_before);
    if (p_.reducer) p_.reducer->abandon_backward();
    p_.scaler->abandon_step();
    for (auto& [counter, before] : counters) counter.data<int64_t>()[0] = before;
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
  for (auto& [counter, before] : counters) {  // undone here, redone by every replay
    int64_t& value = counter.data<int64_t>()[0];
    if (value != before) g->host_counters.emplace_back(counter, value - before);
    value = before;
  }
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
  for (const auto& [counter, delta] : g.host_counters) counter.data<int64_t>()[0] += delta;
  status_.push_replayed(batch, g.status);
  pending_.push_back({key.step_now});
}

}  // namespace kestrel::yolo
