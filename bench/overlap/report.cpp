#include "bench/overlap/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <tuple>

#include "base/error.h"

namespace kestrel::bench::overlap {
namespace {

using ConfigKey = std::tuple<int, double, bool>;  // world, cap_mb, overlap
using Steps = std::map<int, std::vector<TimelineRow>>;  // step -> its buckets in launch order

std::map<ConfigKey, Steps> group_rows(const std::vector<TimelineRow>& rows) {
  std::map<ConfigKey, Steps> out;
  for (const TimelineRow& r : rows) out[{r.world, r.cap_mb, r.overlap}][r.step].push_back(r);
  for (auto& [key, steps] : out)
    for (auto& [s, buckets] : steps)
      std::sort(buckets.begin(), buckets.end(), [](const auto& a, const auto& b) { return a.bucket < b.bucket; });
  return out;
}

// A collective's own duration: from when it could start (launched, and the previous one on the
// single communication thread finished) to when it was seen done. One sample per configuration and
// bucket: the median over its steps.
std::vector<CollectiveSample> collective_samples(const std::map<ConfigKey, Steps>& groups) {
  std::vector<CollectiveSample> out;
  for (const auto& [key, steps] : groups) {
    if (std::get<2>(key)) continue;  // overlap runs share the CPU with backward: not a clean sample
    std::map<size_t, std::vector<double>> per_bucket;
    std::map<size_t, int64_t> bytes;
    for (const auto& [s, buckets] : steps) {
      double previous_done = -1e300;
      for (size_t i = 0; i < buckets.size(); ++i) {
        per_bucket[i].push_back(buckets[i].done_us - std::max(buckets[i].launch_us, previous_done));
        bytes[i] = buckets[i].bytes;
        previous_done = buckets[i].done_us;
      }
    }
    for (auto& [i, times] : per_bucket) out.push_back({bytes[i], std::get<0>(key), median(times)});
  }
  return out;
}

// The configuration's compute as the no-overlap run at the same world and cap measured it (medians
// over steps): forward, backward, and per bucket its ready time and size (one indivisible event).
Profile bucket_profile(const Steps& steps) {
  Profile p;
  const std::vector<TimelineRow>& first = steps.begin()->second;
  std::vector<double> pre, backward;
  std::vector<std::vector<double>> ready(first.size());
  p.grads.resize(first.size());
  for (const auto& [s, buckets] : steps) {
    KESTREL_CHECK(buckets.size() == first.size(), "overlap validate: steps of one configuration differ in bucket count");
    pre.push_back(buckets[0].pre_us);
    backward.push_back(buckets[0].backward_us);
    for (size_t i = 0; i < buckets.size(); ++i) {
      ready[i].push_back(buckets[i].ready_us);
      p.grads[i].bytes = buckets[i].bytes;
    }
  }
  p.pre_us = median(pre);
  p.backward_us = median(backward);
  for (size_t i = 0; i < ready.size(); ++i) p.grads[i].ready_us = median(ready[i]);
  return p;
}

double median_of(const Steps& steps, double TimelineRow::*field) {
  std::vector<double> v;
  for (const auto& [s, buckets] : steps) v.push_back(buckets[0].*field);
  return median(v);
}

}  // namespace

Link fit_measured_link(const std::vector<TimelineRow>& rows) { return fit_link(collective_samples(group_rows(rows))); }

Link validate(const std::vector<TimelineRow>& rows) {
  const auto groups = group_rows(rows);
  const Link link = fit_link(collective_samples(groups));
  std::printf("\nring model fitted to the no-overlap runs' all-reduces: alpha = %.1f us, bandwidth = %.3f GB/s\n",
              link.alpha_us, link.bytes_per_us * 1e6 / 1e9);
  std::printf("%5s %7s %7s %8s | %11s %11s %7s | %13s %13s %7s\n", "world", "cap_mb", "overlap", "buckets",
              "step_ms", "predicted", "err%", "bwd+comm_ms", "predicted", "err%");
  double sum_err = 0, sum_err_comm = 0;
  int count = 0;
  for (const auto& [key, steps] : groups) {
    const auto& [world, cap, overlap] = key;
    const auto base = groups.find({world, cap, false});
    if (base == groups.end()) continue;
    const Profile profile = bucket_profile(base->second);
    // A cap of one byte keeps the measured buckets as they are.
    const Prediction pred = simulate(profile, 1, world, link, overlap);
    const double step = median_of(steps, &TimelineRow::step_us), comm = median_of(steps, &TimelineRow::finalize_us);
    const double pred_comm = pred.step_us - profile.pre_us;
    const double err = (pred.step_us - step) / step, err_comm = (pred_comm - comm) / comm;
    std::printf("%5d %7g %7s %8zu | %11.2f %11.2f %+7.1f | %13.2f %13.2f %+7.1f\n", world, cap,
                overlap ? "on" : "off", pred.buckets.size(), step / 1e3, pred.step_us / 1e3, 100 * err, comm / 1e3,
                pred_comm / 1e3, 100 * err_comm);
    std::printf("{\"bench\":\"overlap_validate\",\"world\":%d,\"cap_mb\":%g,\"overlap\":%s,\"step_ms\":%.3f,"
                "\"predicted_step_ms\":%.3f,\"rel_err\":%.4f,\"bwd_comm_ms\":%.3f,\"predicted_bwd_comm_ms\":%.3f,"
                "\"rel_err_bwd_comm\":%.4f}\n",
                world, cap, overlap ? "true" : "false", step / 1e3, pred.step_us / 1e3, err, comm / 1e3,
                pred_comm / 1e3, err_comm);
    sum_err += std::abs(err);
    sum_err_comm += std::abs(err_comm);
    ++count;
  }
  KESTREL_CHECK(count > 0, "overlap validate: no configuration has a no-overlap run to predict from");
  std::printf("mean |relative error|: step %.1f%%, backward+communication %.1f%% over %d configurations\n",
              100 * sum_err / count, 100 * sum_err_comm / count, count);
  return link;
}

void scaling_table(const Profile& measured, const TableOptions& o) {
  Profile p = measured;
  p.pre_us *= o.compute_scale;
  p.backward_us *= o.compute_scale;
  p.post_us *= o.compute_scale;
  for (GradEvent& g : p.grads) g.ready_us *= o.compute_scale;
  std::vector<int64_t> caps;
  for (double mb : o.caps_mb) caps.push_back(static_cast<int64_t>(mb * 1024 * 1024));
  int64_t total = 0;
  for (const GradEvent& g : p.grads) total += g.bytes;

  std::printf("\nscaling: compute %.2f ms forward + %.2f ms backward per step, %.2f MB of gradients, %d per node;\n"
              "intra-node %.2f GB/s alpha %.1f us, inter-node %.2f GB/s alpha %.1f us\n",
              p.pre_us / 1e3, p.backward_us / 1e3, total / 1048576.0, o.net.gpus_per_node,
              o.net.intra.bytes_per_us / 1e3, o.net.intra.alpha_us, o.net.inter.bytes_per_us / 1e3,
              o.net.inter.alpha_us);
  std::printf("%6s %10s %14s %13s %12s %11s %14s %11s\n", "N", "single_ms", "no_overlap_ms", "overlap_ms",
              "best_cap_mb", "eff_no_ovl", "eff_overlap", "hidden%");
  std::ofstream csv;
  if (!o.csv_path.empty()) {
    csv.open(o.csv_path);
    KESTREL_CHECK(csv, "overlap simulate: cannot write ", o.csv_path);
    csv << "world,single_ms,no_overlap_ms,no_overlap_cap_mb,overlap_ms,best_cap_mb,eff_no_overlap,eff_overlap,"
           "overlap_efficiency\n";
  }
  const double single = p.pre_us + p.backward_us + p.post_us;
  for (int n = 2; n <= 1024; n *= 2) {
    const Link link = o.net.link_for(n);
    const int64_t best_off = best_bucket_bytes(p, caps, n, link, false);
    const int64_t best_on = best_bucket_bytes(p, caps, n, link, true);
    const Prediction off = simulate(p, best_off, n, link, false), on = simulate(p, best_on, n, link, true);
    std::printf("%6d %10.2f %14.2f %13.2f %12g %10.1f%% %13.1f%% %10.1f%%\n", n, single / 1e3, off.step_us / 1e3,
                on.step_us / 1e3, best_on / 1048576.0, 100 * single / off.step_us, 100 * single / on.step_us,
                100 * on.overlap_efficiency);
    if (csv.is_open())
      csv << n << ',' << single / 1e3 << ',' << off.step_us / 1e3 << ',' << best_off / 1048576.0 << ','
          << on.step_us / 1e3 << ',' << best_on / 1048576.0 << ',' << single / off.step_us << ','
          << single / on.step_us << ',' << on.overlap_efficiency << '\n';
  }
}

}  // namespace kestrel::bench::overlap
