#include "bench/overlap/bandwidth_model.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "base/error.h"

namespace kestrel::bench::overlap {

double parse_rate_bits(const std::string& rate) {
  std::string s;
  for (char c : rate) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  double scale = 0;
  if (unit == "bit") scale = 1;
  else if (unit == "kbit") scale = 1e3;
  else if (unit == "mbit") scale = 1e6;
  else if (unit == "gbit") scale = 1e9;
  KESTREL_CHECK(used > 0 && scale > 0 && value > 0, "overlap: '", rate,
                "' is no tc rate; write a positive number and bit, kbit, mbit or gbit (e.g. 200mbit)");
  return value * scale;
}

double overlap_efficiency(double comm_alone_us, double backward_us, double exposed_us) {
  const double hideable = std::max(0.0, std::min(comm_alone_us, backward_us));
  if (hideable <= 0) return 1.0;
  const double hidden = std::clamp(comm_alone_us - exposed_us, 0.0, hideable);
  return hidden / hideable;
}

Spread spread(const std::vector<double>& values) {
  if (values.empty()) return {};
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {median(values), *lo, *hi};
}

Calibration calibrate(const std::vector<CollectiveSample>& samples, double rate_bits) {
  KESTREL_CHECK(rate_bits > 0, "calibrate: the rate must be > 0 bit/s, got ", rate_bits);
  const Link fitted = fit_link(samples);
  return {fitted.alpha_us, fitted.bytes_per_us / (rate_bits / 8 / 1e6)};
}

Link link_at(const Calibration& c, double rate_bits) {
  KESTREL_CHECK(rate_bits > 0, "link_at: the rate must be > 0 bit/s, got ", rate_bits);
  return {c.alpha_us, c.wire_efficiency * rate_bits / 8 / 1e6};
}

RunMedians run_medians(const std::vector<TimelineRow>& rows, double cap_mb, bool overlap) {
  std::map<int, const TimelineRow*> steps;  // a step's step-level columns repeat on its bucket rows
  std::map<int, int> buckets;
  for (const TimelineRow& r : rows)
    if (r.cap_mb == cap_mb && r.overlap == overlap) {
      steps[r.step] = &r;
      ++buckets[r.step];
    }
  RunMedians m;
  if (steps.empty()) return m;
  std::vector<double> step, pre, backward, exposed;
  for (const auto& [s, r] : steps) {
    step.push_back(r->step_us);
    pre.push_back(r->pre_us);
    backward.push_back(r->backward_us);
    exposed.push_back(r->finalize_us - r->backward_us);
  }
  m.found = true;
  m.buckets = buckets.begin()->second;
  m.step_us = median(step);
  m.pre_us = median(pre);
  m.backward_us = median(backward);
  m.exposed_us = median(exposed);
  return m;
}

PairMedians pair_medians(const std::vector<TimelineRow>& rank0, const std::vector<TimelineRow>& rank1,
                         double cap_mb, bool overlap) {
  auto steps = [&](const std::vector<TimelineRow>& rows) {
    std::map<int, const TimelineRow*> out;
    for (const TimelineRow& r : rows)
      if (r.cap_mb == cap_mb && r.overlap == overlap && r.start_us > 0) out[r.step] = &r;
    return out;
  };
  const auto a = steps(rank0), b = steps(rank1);
  std::vector<double> late, last_backward, exposed;
  for (const auto& [step, r0] : a) {
    const auto it = b.find(step);
    if (it == b.end()) continue;
    const TimelineRow* r1 = it->second;
    const double end0 = r0->start_us + r0->pre_us + r0->backward_us;
    const double end1 = r1->start_us + r1->pre_us + r1->backward_us;
    const double fin = std::max(r0->start_us + r0->pre_us + r0->finalize_us, r1->start_us + r1->pre_us + r1->finalize_us);
    late.push_back(end1 - end0);
    last_backward.push_back(end1 > end0 ? r1->backward_us : r0->backward_us);
    exposed.push_back(std::max(0.0, fin - std::max(end0, end1)));
  }
  PairMedians m;
  if (late.empty()) return m;
  m.found = true;
  m.peer_late_us = median(late);
  m.last_backward_us = median(last_backward);
  m.exposed_after_last_us = median(exposed);
  return m;
}

double alone_median_us(const std::vector<AloneRow>& rows, double cap_mb) {
  std::map<int, double> per_rep;
  for (const AloneRow& r : rows)
    if (r.cap_mb == cap_mb) per_rep[r.rep] += r.us;
  std::vector<double> totals;
  for (const auto& [rep, us] : per_rep) totals.push_back(us);
  return median(totals);
}

Profile with_compute(const Profile& profile, double pre_us, double backward_us) {
  KESTREL_CHECK(profile.backward_us > 0 && backward_us > 0 && pre_us >= 0,
                "with_compute: backward times must be > 0 and the forward time >= 0");
  Profile p = profile;
  p.pre_us = pre_us;
  p.backward_us = backward_us;
  for (GradEvent& g : p.grads) g.ready_us *= backward_us / profile.backward_us;
  return p;
}

double relative_error(double predicted, double measured) {
  KESTREL_CHECK(measured > 0, "relative_error: the measured value must be > 0, got ", measured);
  return (predicted - measured) / measured;
}

}  // namespace kestrel::bench::overlap
