#include "yolo/train/step_status.h"

#include "engine/host_sync.h"
#include "engine/ops/launch.h"
#include "kernels/step_flags.h"
#include "kernels/yolo_loss.h"

namespace kestrel::yolo {

StepStatusQueue::StepStatusQueue(const RankInfo& rank, Device device)
    : rank_(rank), device_(device) {}

void StepStatusQueue::push(int64_t batch, const Tensor& summary, const Tensor& requests,
                           bool to_host) {
  KESTREL_CHECK(summary.device() == device_ && summary.dtype() == DType::F64 &&
                    summary.numel() == kernels::kSummarySize && summary.is_contiguous(),
                "StepStatusQueue: the loss summary must be float64[", kernels::kSummarySize,
                "] on ", device_.str(), ", got ", summary.describe());
  const Tensor items = summary.slice(0, kernels::kSummaryBox, kernels::kSummaryBox + 3);
  push(batch, items, items, requests, to_host);
}

void StepStatusQueue::push(int64_t batch, const Tensor& components, const Tensor& items,
                           const Tensor& requests, bool to_host) {
  for (const Tensor* t : {&components, &items})
    KESTREL_CHECK(t->device() == device_ && t->dtype() == DType::F64 && t->is_contiguous() &&
                      (t->numel() == 3 || (t == &items && t->numel() == 4)),
                  "StepStatusQueue: the loss components must be float64[3] and the items float64[3 or 4] on ",
                  device_.str(), ", got ", t->describe());
  KESTREL_CHECK(requests.device() == device_ && requests.dtype() == DType::F32 &&
                    requests.numel() == kernels::kStepRequests && requests.is_contiguous(),
                "StepStatusQueue: the requests must be float32[", kernels::kStepRequests, "] on ",
                device_.str(), ", got ", requests.describe());
  Entry e;
  e.batch = batch;
  e.to_host = to_host;
  e.flags = Tensor::empty({kernels::kStepFlags}, DType::F32, device_);
  const double* losses = components.data<double>();
  ops::launch(
      device_,
      [&] { kernels::step_flags_cpu(losses, requests.data<float>(), e.flags.data<float>()); },
      [&](cudaStream_t s) {
        kernels::step_flags_cuda(losses, requests.data<float>(), e.flags.data<float>(), s);
      });
  e.losses = items;
  if (rank_.world > 1) e.work = rank_.group->all_reduce(e.flags, dist::ReduceOp::Sum);
  entries_.push_back(std::move(e));
}

void check_ranks_ran_alike(const BatchStatus& s, int world) {
  KESTREL_CHECK(s.replayed_ranks == 0 || s.replayed_ranks == world, "batch ", s.batch, ": ",
                s.replayed_ranks, " of ", world, " ranks ran it as a CUDA graph replay and the "
                "others eagerly, so their collectives no longer pair up (a Kestrel bug: please "
                "report it); train with --cuda-graph off");
}

void StepStatusQueue::order_after_reduce(Entry& e) {
  if (e.flags_ordered) return;
  e.flags_ordered = true;
  if (e.work) e.work->wait();
  if (e.to_host) copy_to_host(e);
}

void StepStatusQueue::copy_to_host(Entry& e) {
  if (device_.is_cpu()) return;
  DeviceGuard guard(device_);
  e.host_flags = Tensor::empty(e.flags.shape(), DType::F32, Device::cpu(), /*pinned=*/true);
  e.host_losses = Tensor::empty(e.losses.shape(), DType::F64, Device::cpu(), /*pinned=*/true);
  e.host_flags.copy_(e.flags, /*non_blocking=*/true);
  e.host_losses.copy_(e.losses, /*non_blocking=*/true);
  e.copied.emplace(device_);
  e.copied->record(current_stream(device_));
}

Tensor StepStatusQueue::newest_flags() {
  KESTREL_CHECK(!entries_.empty(), "StepStatusQueue::newest_flags: nothing was pushed");
  order_after_reduce(entries_.back());
  return entries_.back().flags;
}

bool StepStatusQueue::oldest_ready() const {
  KESTREL_CHECK(!entries_.empty(), "StepStatusQueue::oldest_ready: nothing was pushed");
  const Entry& e = entries_.front();
  if (device_.is_cpu()) return !e.work || e.work->is_completed();
  return e.copied && e.copied->query();
}

BatchStatus StepStatusQueue::pop() {
  KESTREL_CHECK(!entries_.empty(), "StepStatusQueue::pop: nothing was pushed");
  Entry& e = entries_.front();
  order_after_reduce(e);
  KESTREL_CHECK(e.to_host, "StepStatusQueue::pop: batch ", e.batch,
                "'s status was captured into a CUDA graph, never run; take_captured() it");
  const float* flags;
  const double* losses;
  if (device_.is_cpu()) {
    // The one read: a collective's end, or (one rank) the CPU values themselves.
    if (e.work) e.work->synchronize();
    else note_host_sync("StepStatusQueue::pop");
    flags = e.flags.data<float>();
    losses = e.losses.data<double>();
  } else {
    e.copied->synchronize();
    flags = e.host_flags.data<float>();
    losses = e.host_losses.data<double>();
  }
  BatchStatus s;
  s.batch = e.batch;
  s.nonfinite_ranks = static_cast<int>(flags[kernels::kFlagNonFinite]);
  s.stop_ranks = static_cast<int>(flags[kernels::kFlagStop]);
  s.replayed_ranks = static_cast<int>(flags[kernels::kFlagReplayed]);
  s.items = static_cast<int>(e.losses.numel());
  s.box = losses[0];
  if (s.items == 4) s.seg = losses[1];
  s.obj = losses[s.items - 2];
  s.cls = losses[s.items - 1];
  entries_.pop_front();
  return s;
}

StepStatusQueue::Captured StepStatusQueue::take_captured() {
  KESTREL_CHECK(!entries_.empty() && !entries_.back().to_host,
                "StepStatusQueue::take_captured: the newest status was not pushed for a capture");
  Entry& e = entries_.back();
  order_after_reduce(e);
  Captured out{e.flags, e.losses};
  entries_.pop_back();
  return out;
}

void StepStatusQueue::restore(const Snapshot& s) {
  KESTREL_CHECK(s.entries <= entries_.size(), "StepStatusQueue::restore: ", entries_.size(),
                " entries, fewer than the snapshot's ", s.entries, " (popped since)");
  while (entries_.size() > s.entries) entries_.pop_back();
}

void StepStatusQueue::push_replayed(int64_t batch, const Captured& outputs) {
  Entry e;
  e.batch = batch;
  e.flags_ordered = true;  // the graph ordered itself after its all-reduce
  if (device_.is_cpu()) {
    // No graphs on the CPU; kept general: the outputs are rewritten by the next replay.
    e.flags = outputs.flags.clone();
    e.losses = outputs.losses.clone();
  } else {
    e.flags = outputs.flags;
    e.losses = outputs.losses;
    copy_to_host(e);
  }
  entries_.push_back(std::move(e));
}

}  // namespace kestrel::yolo
