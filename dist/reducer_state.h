// The Reducer's bookkeeping, apart from tensors and transport (as PyTorch's DDP separates them):
// which parameter lives where in the flat gradient buffers, which bucket it belongs to, and which
// buckets may be launched once a parameter's gradient is ready.
#pragma once
#include <cstdint>
#include <vector>

namespace kestrel::dist {

// What the layout needs to know about one parameter.
struct ParamInfo {
  int64_t numel = 0;
  int64_t element_size = 0;  // bytes: 1, 2, 4 or 8 (a divisor of kGradAlignBytes)
  int group = 0;             // flat buffer it goes into (one per dtype)
};

struct Bucket {
  int group = 0;
  int64_t offset = 0;  // first element within the group's flat buffer (aligned)
  int64_t numel = 0;   // from its first parameter's start to its last one's end, gaps included
  int64_t bytes = 0;
  std::vector<int> params;  // in layout order
};

struct ParamSlot {
  int bucket = -1;
  int64_t offset = 0;  // first element within its group's flat buffer (aligned)
};

// Every parameter, and so every bucket, starts at a multiple of this many bytes within its flat
// buffer (whose memory the allocators align at least as much): what NCCL's and the kernels'
// vector loads want, instead of the odd offsets after a 255-element Detect bias.
inline constexpr int64_t kGradAlignBytes = 256;

// Parameters laid out in `order` (every parameter exactly once), each group's parameters placed in
// that order at the next kGradAlignBytes boundary (the gaps are padding that stays zero), cut into
// buckets that span at most cap_bytes, padding included (a parameter larger than the cap gets a
// bucket of its own). Buckets are numbered in order of their first parameter, so launching them
// in index order follows `order`.
// Edge buckets (edge_bytes < cap_bytes): each group's first bucket spans at most edge_bytes, and
// its last parameters in `order`, as many as fit in edge_bytes (at least one), get a bucket of
// their own. In arrival order the first bucket is then ready, and its all-reduce under way, early
// in backward, and the bucket that can only start when backward ends is small: where bandwidth
// is short, that last all-reduce is what stays exposed (docs/history/distributed.md, overlap).
// cuts (empty, or one entry per position of `order`): a new bucket also begins wherever it is true
// (the timed layout's cuts, dist/timed_layout.h); the cap and the edge rules still hold.
struct BucketPlan {
  std::vector<Bucket> buckets;
  std::vector<ParamSlot> slots;      // indexed by parameter
  std::vector<int64_t> group_numel;  // size of each flat buffer
  std::vector<int> order;

  static BucketPlan build(const std::vector<ParamInfo>& params, const std::vector<int>& order,
                          int64_t cap_bytes, int64_t edge_bytes = 0,  // 0: no edge buckets
                          const std::vector<bool>& cuts = {});
};

// Per-step readiness: counts each bucket's missing gradients and hands out buckets to launch,
// strictly in index order, so every rank issues its collectives in the same sequence even if its
// gradients arrive in another order.
class ReadyTracker {
 public:
  explicit ReadyTracker(const BucketPlan* plan) : plan_(plan) { reset(); }
  void reset();
  // Marks param ready; returns the buckets that can now be launched (possibly none). Throws if the
  // parameter was already marked in this step.
  std::vector<int> mark_ready(int param);
  bool is_ready(int param) const { return ready_[param]; }
  bool bucket_ready(int bucket) const { return pending_[bucket] == 0; }
  bool all_launched() const { return next_launch_ == static_cast<int>(plan_->buckets.size()); }
  // Parameters not yet marked, in layout order.
  std::vector<int> unready_params() const;
  // Arrival order of this step's marked parameters.
  const std::vector<int>& arrivals() const { return arrivals_; }

 private:
  const BucketPlan* plan_;
  std::vector<int> pending_;  // per bucket
  std::vector<bool> ready_;   // per param
  std::vector<int> arrivals_;
  int next_launch_ = 0;
};

}  // namespace kestrel::dist
