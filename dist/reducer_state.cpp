#include "dist/reducer_state.h"

#include <algorithm>

#include "base/error.h"

namespace kestrel::dist {

BucketPlan BucketPlan::build(const std::vector<ParamInfo>& params, const std::vector<int>& order,
                             int64_t cap_bytes, int64_t edge_bytes,
                             const std::vector<bool>& cuts) {
  KESTREL_CHECK(cap_bytes > 0, "reducer: the bucket cap must be positive, got ", cap_bytes,
                " bytes");
  KESTREL_CHECK(edge_bytes >= 0, "reducer: the edge bucket cap must not be negative, got ",
                edge_bytes, " bytes");
  const int64_t edge = edge_bytes > 0 ? std::min(edge_bytes, cap_bytes) : cap_bytes;
  KESTREL_CHECK(order.size() == params.size(), "reducer: a layout order of ", order.size(),
                " entries for ", params.size(), " parameters");
  KESTREL_CHECK(cuts.empty() || cuts.size() == order.size(), "reducer: ", cuts.size(),
                " bucket cuts for a layout order of ", order.size(), " entries");
  std::vector<bool> seen(params.size(), false);
  for (int p : order) {
    KESTREL_CHECK(p >= 0 && p < static_cast<int>(params.size()) && !seen[p],
                  "reducer: layout order names parameter ", p, " twice or out of range");
    seen[p] = true;
  }
  BucketPlan plan;
  plan.order = order;
  plan.slots.resize(params.size());
  int groups = 0;
  for (const ParamInfo& p : params) groups = std::max(groups, p.group + 1);
  plan.group_numel.assign(groups, 0);
  std::vector<int> open(groups, -1);  // the bucket each group is filling
  // Where each group's last bucket begins: the longest tail of its parameters in `order` within
  // the edge cap (at least its last parameter); -1 without edge buckets.
  std::vector<int> tail_start(groups, -1);
  if (edge < cap_bytes) {
    std::vector<int64_t> tail_bytes(groups, 0);
    std::vector<bool> closed(groups, false);
    for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
      const ParamInfo& info = params[order[i]];
      if (closed[info.group]) continue;
      tail_bytes[info.group] += info.numel * info.element_size;
      if (tail_start[info.group] >= 0 && tail_bytes[info.group] > edge) closed[info.group] = true;
      else tail_start[info.group] = i;
    }
  }
  std::vector<bool> first(groups, true);  // the group's first bucket is still open
  for (size_t i = 0; i < order.size(); ++i) {
    const int p = order[i];
    const ParamInfo& info = params[p];
    KESTREL_CHECK(info.element_size > 0 && kGradAlignBytes % info.element_size == 0,
                  "reducer: parameter ", p, " has elements of ", info.element_size,
                  " bytes; gradient buckets hold 1, 2, 4 or 8-byte elements");
    const int64_t align = kGradAlignBytes / info.element_size;  // in elements
    const int64_t start = (plan.group_numel[info.group] + align - 1) / align * align;
    int& b = open[info.group];
    const int64_t limit = first[info.group] ? edge : cap_bytes;
    if (b < 0 || static_cast<int>(i) == tail_start[info.group] || (!cuts.empty() && cuts[i]) ||
        (start + info.numel - plan.buckets[b].offset) * info.element_size > limit) {
      if (b >= 0) first[info.group] = false;
      b = static_cast<int>(plan.buckets.size());
      plan.buckets.push_back({info.group, start, 0, 0, {}});
    }
    Bucket& bucket = plan.buckets[b];
    plan.slots[p] = {b, start};
    plan.group_numel[info.group] = start + info.numel;
    bucket.numel = start + info.numel - bucket.offset;
    bucket.bytes = bucket.numel * info.element_size;
    bucket.params.push_back(p);
  }
  return plan;
}

void ReadyTracker::reset() {
  pending_.clear();
  for (const Bucket& b : plan_->buckets) pending_.push_back(static_cast<int>(b.params.size()));
  ready_.assign(plan_->slots.size(), false);
  arrivals_.clear();
  next_launch_ = 0;
}

std::vector<int> ReadyTracker::mark_ready(int param) {
  KESTREL_CHECK(param >= 0 && param < static_cast<int>(ready_.size()), "reducer: parameter index ",
                param, " out of range");
  KESTREL_CHECK(!ready_[param], "reducer: parameter ", param,
                "'s gradient became ready twice in "
                "one step (two backward passes without finalize()); call finalize() after each "
                "synchronised backward, or accumulate under no_sync");
  ready_[param] = true;
  arrivals_.push_back(param);
  --pending_[plan_->slots[param].bucket];
  std::vector<int> launch;
  while (next_launch_ < static_cast<int>(pending_.size()) && pending_[next_launch_] == 0)
    launch.push_back(next_launch_++);
  return launch;
}

std::vector<int> ReadyTracker::unready_params() const {
  std::vector<int> out;
  for (int p : plan_->order)
    if (!ready_[p]) out.push_back(p);
  return out;
}

}  // namespace kestrel::dist
