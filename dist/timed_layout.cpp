#include "dist/timed_layout.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace kestrel::dist {

LinkEstimate estimate_link(const StepTimeline& t) {
  double busy = 0, prev_done = -std::numeric_limits<double>::infinity();
  int64_t bytes = 0;
  std::vector<double> gaps;
  for (const BucketTiming& b : t.buckets) {
    if (b.launch_us < 0 || b.done_us < 0) continue;
    const double start = std::max(b.launch_us, prev_done);
    if (b.done_us > start) {
      busy += b.done_us - start;
      bytes += b.bytes;
    }
    prev_done = std::max(prev_done, b.done_us);
    if (b.ready_us >= 0 && b.launch_us >= b.ready_us) gaps.push_back(b.launch_us - b.ready_us);
  }
  LinkEstimate link;
  if (busy <= 0 || bytes <= 0) return link;
  link.us_per_byte = busy / static_cast<double>(bytes);
  double gap = 0;
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    const size_t n = gaps.size();
    gap = n % 2 ? gaps[n / 2] : (gaps[n / 2 - 1] + gaps[n / 2]) / 2;
  }
  link.per_bucket_us = std::max(gap, kMinBucketUs);
  return link;
}

std::vector<bool> timed_cuts(const std::vector<ParamInfo>& params, const std::vector<int>& order,
                             const std::vector<double>& arrival_us, const LinkEstimate& link,
                             int64_t cap_bytes) {
  KESTREL_CHECK(order.size() == params.size() && arrival_us.size() == params.size(),
                "reducer: timed layout of ", params.size(), " parameters got an order of ",
                order.size(), " and ", arrival_us.size(), " arrival times");
  KESTREL_CHECK(cap_bytes > 0, "reducer: the bucket cap must be positive, got ", cap_bytes, " bytes");
  std::vector<bool> cuts(order.size(), false);
  if (!link.valid()) return cuts;
  const double per_bucket = std::max(link.per_bucket_us, kMinBucketUs);
  const double us_per_byte = link.us_per_byte * kLinkHeadroom;
  int groups = 0;
  for (const ParamInfo& p : params) groups = std::max(groups, p.group + 1);
  for (int g = 0; g < groups; ++g) {
    std::vector<size_t> pos;  // positions in `order` of the group's parameters
    for (size_t i = 0; i < order.size(); ++i)
      if (params[order[i]].group == g) pos.push_back(i);
    const size_t m = pos.size();
    if (m == 0) continue;
    // Bytes of parameter k, and the padded bytes before it from the group's first parameter (every
    // parameter starts at a kGradAlignBytes boundary, as BucketPlan::build places them).
    std::vector<int64_t> raw(m), before(m + 1, 0);
    for (size_t k = 0; k < m; ++k) {
      const ParamInfo& info = params[order[pos[k]]];
      raw[k] = info.numel * info.element_size;
      before[k + 1] = before[k] + (raw[k] + kGradAlignBytes - 1) / kGradAlignBytes * kGradAlignBytes;
    }
    // finish[k][c]: the earliest the link can have finished c + 1 buckets covering parameters
    // 0..k, the last one ending at k; start[k][c] that last bucket's first parameter.
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> finish(m, std::vector<double>(m, inf));
    std::vector<std::vector<size_t>> start(m, std::vector<size_t>(m, 0));
    for (size_t k = 0; k < m; ++k) {
      double ready = -inf;
      for (size_t k0 = k + 1; k0-- > 0;) {
        const int64_t span = before[k] - before[k0] + raw[k];
        if (k0 < k && span > cap_bytes) break;
        ready = std::max(ready, arrival_us[order[pos[k0]]]);
        const double cost = per_bucket + static_cast<double>(span) * us_per_byte;
        for (size_t c = k0 == 0 ? 0 : 1; c <= k0; ++c) {  // c buckets before this one
          const double free_at = c == 0 ? 0.0 : finish[k0 - 1][c - 1];
          const double end = std::max(ready, free_at) + cost;
          if (end < finish[k][c]) {
            finish[k][c] = end;
            start[k][c] = k0;
          }
        }
      }
    }
    // The fewest buckets within the tolerance of the earliest finish.
    double latest = 0;
    for (size_t k = 0; k < m; ++k) latest = std::max(latest, arrival_us[order[pos[k]]]);
    const double best = *std::min_element(finish[m - 1].begin(), finish[m - 1].end());
    const double tolerance = std::max(per_bucket, kFinishTolerance * latest);
    size_t c = 0;
    while (finish[m - 1][c] > best + tolerance) ++c;
    for (size_t k = m; k > 0;) {
      const size_t k0 = start[k - 1][c];
      cuts[pos[k0]] = true;
      k = k0;
      if (k > 0) --c;
    }
  }
  return cuts;
}

}  // namespace kestrel::dist
