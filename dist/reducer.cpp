#include "dist/reducer.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "dist/reducer_state.h"
#include "dist/timed_layout.h"
#include "engine/autograd.h"

namespace kestrel::dist {

struct Reducer::State {
  std::shared_ptr<ProcessGroup> group;
  ReducerOptions options;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<ParamInfo> infos;
  std::vector<DType> group_dtypes;
  Device device = Device::cpu();

  std::unique_ptr<BucketPlan> plan;
  std::unique_ptr<ReadyTracker> tracker;
  std::vector<Tensor> flat;                  // one per group
  std::vector<Tensor> wire;                  // per group: its 16-bit twin under compression
  std::vector<Tensor> views;                 // per parameter: its gradient inside flat
  std::vector<std::shared_ptr<Work>> works;  // per bucket, this step

  bool sync = true;
  bool armed = false;  // between prepare_for_backward() and finalize()
  bool rebuilt = false;
  bool timed = false;  // the timed layout was made (or will never be)
  bool clocks = false;  // this step reads the clock per bucket (record_timeline, or the timing step)
  std::vector<double> arrival_us;  // the timing step's gradient arrivals, from backward's start
  std::vector<bool> cuts;          // the timed cuts of the layout in use (empty: none)
  int64_t step = 0;
  StepTimeline timeline;
  std::vector<std::string> unused;

  int64_t cap_bytes() const {
    return std::max<int64_t>(1, static_cast<int64_t>(options.bucket_cap_mb * 1024.0 * 1024.0));
  }
  int64_t edge_bytes() const {
    return static_cast<int64_t>(options.edge_bucket_cap_mb * 1024.0 * 1024.0);
  }

  // New flat buffers in plan's layout; each parameter's gradient moves into its view (values kept).
  void lay_out(BucketPlan new_plan) {
    plan = std::make_unique<BucketPlan>(std::move(new_plan));
    tracker = std::make_unique<ReadyTracker>(plan.get());
    flat.clear();
    wire.clear();
    for (size_t g = 0; g < group_dtypes.size(); ++g) {
      flat.push_back(Tensor::zeros({plan->group_numel[g]}, group_dtypes[g], device));
      wire.push_back(compresses(static_cast<int>(g))
                         ? Tensor::empty({plan->group_numel[g]},
                                         grad_compress_dtype(options.compress), device)
                         : Tensor());
    }
    views.assign(params.size(), Tensor());
    for (size_t p = 0; p < params.size(); ++p) {
      const Tensor& base = flat[infos[p].group];
      Tensor view = make_view(base, params[p].shape(), contiguous_strides(params[p].shape()),
                              base.storage_offset() + plan->slots[p].offset);
      const Tensor old = params[p].grad();
      if (old.defined()) view.copy_(old);
      params[p].set_grad(view);
      views[p] = view;
    }
  }

  bool is_view(int p, const Tensor& g) const {
    return g.defined() && g.storage() == views[p].storage() &&
           g.storage_offset() == views[p].storage_offset();
  }

  bool compresses(int g) const {
    return options.compress != GradCompress::None && group_dtypes[g] == DType::F32;
  }

  Tensor bucket_slice(int b, const std::vector<Tensor>& buffers) const {
    const Bucket& bucket = plan->buckets[b];
    return buffers[bucket.group].slice(0, bucket.offset, bucket.offset + bucket.numel);
  }

  void launch(int b) {
    if (compresses(plan->buckets[b].group)) {
      const Tensor w = bucket_slice(b, wire);
      compress_gradients(bucket_slice(b, flat), w, group->size());
      works[b] = group->all_reduce(w, ReduceOp::Sum);
    } else {
      works[b] = group->all_reduce(bucket_slice(b, flat), ReduceOp::Average);
    }
    if (clocks) timeline.buckets[b].launch_us = now_us();
  }

  void poll_done() {
    if (!clocks) return;
    const double t = now_us();
    for (size_t b = 0; b < works.size(); ++b)
      if (works[b] && timeline.buckets[b].done_us < 0 && works[b]->is_completed())
        timeline.buckets[b].done_us = t;
  }

  void mark_ready(int p) {
    const std::vector<int> launchable = tracker->mark_ready(p);
    const int b = plan->slots[p].bucket;
    if (clocks && tracker->bucket_ready(b))
      timeline.buckets[b].ready_us = now_us();
    if (options.overlap)
      for (int b : launchable) launch(b);
  }

  void on_grad_ready(int p) {
    if (!sync) return;
    KESTREL_CHECK(armed, "reducer: parameter ", names[p],
                  "'s gradient arrived outside a "
                  "synchronised step; call prepare_for_backward() before backward() (or turn "
                  "sync off with NoSyncGuard to accumulate)");
    // An optimizer that reset .grad broke the view: put the gradient back where buckets read it.
    const Tensor g = params[p].grad();
    if (!is_view(p, g)) {
      views[p].copy_(g);
      params[p].set_grad(views[p]);
    }
    if (timing_step()) arrival_us[p] = now_us() - timeline.backward_start_us;
    mark_ready(p);
    poll_done();
  }

  // The step whose times the timed layout is cut from: the first in the arrival-order layout.
  bool timing_step() const {
    return options.timed_buckets && options.rebuild_buckets && options.overlap &&
           !device.is_cuda() && rebuilt && !timed;
  }

  // Cuts the buckets once more from the timing step's arrivals and link cost (rank 0's, broadcast).
  void relayout_timed() {
    const size_t n = params.size();
    std::vector<int64_t> flags(n, 0);
    if (group->rank() == 0) {
      const double end = timeline.backward_end_us - timeline.backward_start_us;
      std::vector<double> arrival(n);
      for (size_t p = 0; p < n; ++p) arrival[p] = arrival_us[p] >= 0 ? arrival_us[p] : end;
      const std::vector<bool> cuts =
          timed_cuts(infos, plan->order, arrival, estimate_link(timeline), cap_bytes());
      for (size_t i = 0; i < n; ++i) flags[i] = cuts[i] ? 1 : 0;
    }
    Tensor flags_t = Tensor::from_vector(flags, {static_cast<int64_t>(n)});
    if (group->size() > 1) {
      Tensor on_device = flags_t.to(device);
      group->broadcast(on_device, 0)->synchronize();
      flags_t = on_device.to(Device::cpu());
    }
    std::vector<bool> cuts;
    bool any = false;
    for (int64_t f : flags_t.to_vector<int64_t>()) {
      cuts.push_back(f != 0);
      any = any || f != 0;
    }
    if (!any) return;  // rank 0 could not measure the link: the layout stays
    this->cuts = cuts;
    BucketPlan next = BucketPlan::build(infos, plan->order, cap_bytes(), edge_bytes(), cuts);
    bool same = next.buckets.size() == plan->buckets.size();
    for (size_t b = 0; same && b < next.buckets.size(); ++b)
      same = next.buckets[b].params == plan->buckets[b].params;
    if (!same) lay_out(std::move(next));
  }

  // Re-lays out the buckets once, in rank 0's arrival order (unseen parameters last).
  void rebuild_from_arrivals() {
    std::vector<int64_t> order;
    for (int p : tracker->arrivals()) order.push_back(p);
    for (int p : tracker->unready_params()) order.push_back(p);
    Tensor order_t = Tensor::from_vector(order, {static_cast<int64_t>(order.size())});
    if (group->size() > 1) {
      Tensor on_device = order_t.to(device);
      group->broadcast(on_device, 0)->synchronize();
      order_t = on_device.to(Device::cpu());
    }
    std::vector<int> new_order;
    for (int64_t p : order_t.to_vector<int64_t>()) new_order.push_back(static_cast<int>(p));
    if (new_order != plan->order)
      lay_out(BucketPlan::build(infos, new_order, cap_bytes(), edge_bytes()));
  }
};

Reducer::Reducer(const NamedTensors& params, std::shared_ptr<ProcessGroup> group,
                 ReducerOptions options)
    : state_(std::make_shared<State>()) {
  KESTREL_CHECK(group, "reducer: no process group");
  KESTREL_CHECK(options.bucket_cap_mb > 0, "reducer: --bucket-cap-mb must be positive, got ",
                options.bucket_cap_mb);
  KESTREL_CHECK(options.edge_bucket_cap_mb >= 0, "reducer: the edge bucket cap must not be negative, got ",
                options.edge_bucket_cap_mb, " MB");
  State& s = *state_;
  s.group = std::move(group);
  s.options = options;
  std::map<DType, int> group_of;
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    KESTREL_CHECK(p.is_leaf(), "reducer: ", name, " is not a leaf tensor; pass parameters");
    if (s.params.empty()) s.device = p.device();
    KESTREL_CHECK(p.device() == s.device, "reducer: parameter ", name, " is on ", p.device().str(),
                  " but the first one is on ", s.device.str(),
                  "; data parallelism needs the whole replica on one device");
    auto [it, added] = group_of.emplace(p.dtype(), static_cast<int>(s.group_dtypes.size()));
    if (added) s.group_dtypes.push_back(p.dtype());
    s.names.push_back(name);
    s.params.push_back(p);
    s.infos.push_back({p.numel(), static_cast<int64_t>(p.element_size()), it->second});
  }
  KESTREL_CHECK(!s.params.empty(), "reducer: none of the ", params.size(),
                " tensors requires grad; nothing to synchronise");
  std::vector<int> order;
  for (int p = static_cast<int>(s.params.size()) - 1; p >= 0; --p) order.push_back(p);
  s.lay_out(BucketPlan::build(s.infos, order, s.cap_bytes(), s.edge_bytes()));
  zero_grad();
  std::weak_ptr<State> weak = state_;
  for (size_t p = 0; p < s.params.size(); ++p)
    s.params[p].register_grad_ready_hook([weak, p](const Tensor&) {
      if (auto state = weak.lock()) state->on_grad_ready(static_cast<int>(p));
    });
}

Reducer::~Reducer() = default;

void Reducer::prepare_for_backward() {
  State& s = *state_;
  if (!s.sync) return;
  KESTREL_CHECK(!s.armed,
                "reducer: prepare_for_backward() twice without finalize(); call "
                "finalize() after each synchronised backward");
  s.tracker->reset();
  s.works.assign(s.plan->buckets.size(), nullptr);
  s.timeline = StepTimeline{};
  s.timeline.step = s.step;
  for (const Bucket& b : s.plan->buckets)
    s.timeline.buckets.push_back({b.bytes, static_cast<int>(b.params.size())});
  s.clocks = s.options.record_timeline || s.timing_step();
  if (s.timing_step()) s.arrival_us.assign(s.params.size(), -1.0);
  s.timeline.backward_start_us = now_us();
  s.armed = true;
}

void Reducer::finalize() {
  State& s = *state_;
  if (!s.sync) return;
  KESTREL_CHECK(s.armed,
                "reducer: finalize() without prepare_for_backward(); call it before "
                "backward()");
  s.timeline.backward_end_us = now_us();
  s.unused.clear();
  for (int p : s.tracker->unready_params()) {
    s.unused.push_back(s.names[p]);
    s.mark_ready(p);
  }
  if (!s.options.overlap)
    for (size_t b = 0; b < s.works.size(); ++b) s.launch(static_cast<int>(b));
  KESTREL_CHECK(s.tracker->all_launched(), "reducer: buckets left unlaunched after finalize");
  s.poll_done();
  for (size_t b = 0; b < s.works.size(); ++b) {
    s.works[b]->wait();
    if (s.compresses(s.plan->buckets[b].group))
      decompress_gradients(s.bucket_slice(static_cast<int>(b), s.wire),
                           s.bucket_slice(static_cast<int>(b), s.flat));
    if (s.clocks && s.timeline.buckets[b].done_us < 0 &&
        s.works[b]->is_completed())
      s.timeline.buckets[b].done_us = now_us();
  }
  s.armed = false;
  if (s.options.rebuild_buckets && !s.rebuilt) {
    s.rebuilt = true;
    s.rebuild_from_arrivals();
  } else if (s.timing_step()) {
    s.timed = true;
    s.relayout_timed();
  }
  s.timeline.finalize_end_us = now_us();
  ++s.step;
}

void Reducer::zero_grad() {
  KESTREL_CHECK(!state_->armed,
                "reducer: zero_grad() during a synchronised step (between "
                "prepare_for_backward() and finalize())");
  for (const Tensor& f : state_->flat) f.zero_();
  for (size_t p = 0; p < state_->params.size(); ++p)
    if (!state_->is_view(static_cast<int>(p), state_->params[p].grad()))
      state_->params[p].set_grad(state_->views[p]);
}

Reducer::Snapshot Reducer::snapshot() const {
  const State& s = *state_;
  return {s.sync,     s.armed, s.rebuilt,  s.timed,
          s.step,     std::make_shared<ReadyTracker>(*s.tracker),
          s.works,    s.timeline, s.unused};
}

void Reducer::restore(const Snapshot& snap) {
  State& s = *state_;
  KESTREL_CHECK(snap.rebuilt == s.rebuilt && snap.timed == s.timed && snap.tracker,
                "reducer: the gradient buckets were laid out anew since the snapshot; a step "
                "that re-lays them out cannot be undone");
  s.sync = snap.sync;
  s.armed = snap.armed;
  s.step = snap.step;
  *s.tracker = *snap.tracker;
  s.works = snap.works;
  s.timeline = snap.timeline;
  s.unused = snap.unused;
}

void Reducer::set_sync(bool sync) {
  KESTREL_CHECK(!state_->armed,
                "reducer: sync changed during a synchronised step; change it "
                "before prepare_for_backward() or after finalize()");
  state_->sync = sync;
}

bool Reducer::sync() const { return state_->sync; }

const StepTimeline& Reducer::last_timeline() {
  State& s = *state_;
  KESTREL_CHECK(s.options.record_timeline,
                "reducer: timelines are not recorded; build it with record_timeline on");
  KESTREL_CHECK(!s.armed, "reducer: the timeline is complete only after finalize()");
  // finalize() only ordered the device after CUDA collectives; wait here for their finish times.
  for (size_t b = 0; b < s.works.size(); ++b)
    if (s.works[b] && s.timeline.buckets[b].done_us < 0) {
      s.works[b]->synchronize();
      s.timeline.buckets[b].done_us = now_us();
    }
  return s.timeline;
}

std::vector<std::string> Reducer::unused_parameters() const { return state_->unused; }

std::optional<Reducer::SettledLayout> Reducer::settled_layout() const {
  const State& s = *state_;
  if (!s.options.rebuild_buckets || !s.rebuilt || s.timing_step()) return std::nullopt;
  SettledLayout out;
  for (int p : s.plan->order) out.order.push_back(s.names[p]);
  out.cuts = s.cuts;
  out.bucket_cap_mb = s.options.bucket_cap_mb;
  out.edge_bucket_cap_mb = s.options.edge_bucket_cap_mb;
  return out;
}

bool Reducer::adopt_layout(const SettledLayout& layout) {
  State& s = *state_;
  KESTREL_CHECK(!s.armed && !s.rebuilt && s.step == 0,
                "reducer: a settled layout is adopted before the first synchronised step");
  const size_t n = s.params.size();
  // Rank 0's layout as one tensor: [usable, order..., cuts...]; usable 0 means "lay out as usual".
  std::vector<int64_t> packed(1 + 2 * n, 0);
  if (s.group->rank() == 0) {
    const bool timed_run = s.options.timed_buckets && s.options.overlap && !s.device.is_cuda();
    bool usable = s.options.rebuild_buckets && layout.bucket_cap_mb == s.options.bucket_cap_mb &&
                  layout.edge_bucket_cap_mb == s.options.edge_bucket_cap_mb &&
                  layout.order.size() == n && (layout.cuts.empty() || layout.cuts.size() == n) &&
                  (timed_run || layout.cuts.empty());
    std::map<std::string, int> index;
    for (size_t p = 0; p < n; ++p) index.emplace(s.names[p], static_cast<int>(p));
    std::vector<bool> seen(n, false);
    for (size_t i = 0; usable && i < n; ++i) {
      auto it = index.find(layout.order[i]);
      KESTREL_CHECK(it != index.end() && !seen[it->second], "reducer: the saved bucket layout names '",
                    layout.order[i], "', ", it == index.end() ? "which this model has no parameter of"
                                                              : "twice",
                    "; the checkpoint is of another model");
      seen[it->second] = true;
      packed[1 + i] = it->second;
      packed[1 + n + i] = !layout.cuts.empty() && layout.cuts[i];
    }
    packed[0] = usable;
  }
  Tensor packed_t = Tensor::from_vector(packed, {static_cast<int64_t>(packed.size())});
  if (s.group->size() > 1) {
    Tensor on_device = packed_t.to(s.device);
    s.group->broadcast(on_device, 0)->synchronize();
    packed_t = on_device.to(Device::cpu());
  }
  packed = packed_t.to_vector<int64_t>();
  if (!packed[0]) return false;
  std::vector<int> order(n);
  std::vector<bool> cuts;
  bool any_cut = false;
  for (size_t i = 0; i < n; ++i) any_cut = any_cut || packed[1 + n + i] != 0;
  for (size_t i = 0; i < n; ++i) {
    order[i] = static_cast<int>(packed[1 + i]);
    if (any_cut) cuts.push_back(packed[1 + n + i] != 0);
  }
  s.lay_out(BucketPlan::build(s.infos, order, s.cap_bytes(), s.edge_bytes(), cuts));
  s.cuts = cuts;
  s.rebuilt = true;
  s.timed = true;
  return true;
}

std::vector<std::vector<std::string>> Reducer::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : state_->plan->buckets) {
    out.emplace_back();
    for (int p : b.params) out.back().push_back(state_->names[p]);
  }
  return out;
}

}  // namespace kestrel::dist
