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

double alone_median_us(const std::vector<AloneRow>& rows, double cap_mb) {
  std::map<int, double> per_rep;
  for (const AloneRow& r : rows)
    if (r.cap_mb == cap_mb) per_rep[r.rep] += r.us;
  std::vector<double> totals;
  for (const auto& [rep, us] : per_rep) totals.push_back(us);
  return median(totals);
}

double relative_error(double predicted, double measured) {
  KESTREL_CHECK(measured > 0, "relative_error: the measured value must be > 0, got ", measured);
  return (predicted - measured) / measured;
}

}  // namespace kestrel::bench::overlap
