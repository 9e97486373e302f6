#include "bench/overlap/bandwidth_model.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>

#include "base/error.h"
#include "bench/linkem/link_emulator.h"

namespace kestrel::bench::overlap {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// parse_rate_bits' reading (linkem's, which the sweep's links are shaped by), 0 for anything that
// is no tc rate.
double rate_or_zero(const std::string& rate) {
  try {
    return linkem::parse_rate(rate);
  } catch (const std::runtime_error&) {
    return 0;
  }
}

// Digits with at most one decimal point: what a delay in ms may be (no sign, exponent, "inf" or
// hexadecimal, all of which std::stod would take).
bool plain_decimal(const std::string& s) {
  const auto digits =
      std::count_if(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
  const auto points = std::count(s.begin(), s.end(), '.');
  return digits > 0 && points <= 1 && static_cast<size_t>(digits + points) == s.size();
}

}  // namespace

double parse_rate_bits(const std::string& rate) {
  const double bits = rate_or_zero(rate);
  KESTREL_CHECK(bits > 0, "overlap: '", rate,
                "' is no tc rate; write a positive number and bit, kbit, mbit or gbit (e.g. 200mbit)");
  return bits;
}

LinkSetting parse_link_setting(const std::string& name) {
  const size_t plus = name.find('+');
  const std::string rate = name.substr(0, plus);
  LinkSetting link{rate_or_zero(rate), 0};
  bool valid = link.rate_bits > 0;
  if (plus != std::string::npos) {
    const std::string delay = name.substr(plus + 1);
    const bool ms = delay.size() > 2 && delay.ends_with("ms");
    const std::string number = ms ? delay.substr(0, delay.size() - 2) : "";
    valid = valid && ms && plain_decimal(number);
    if (valid) link.delay_us = std::stod(number) * 1e3;
  }
  KESTREL_CHECK(valid, "overlap: '", name,
                "' is no link setting; write a tc rate (a positive number and bit, kbit, mbit or gbit), "
                "optionally with a one-way delay of 0 or more milliseconds: 1gbit, 200mbit, 1gbit+0.2ms");
  return link;
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

Calibration calibrate(const std::vector<CollectiveSample>& samples, double rate_bits, double delay_us) {
  KESTREL_CHECK(rate_bits > 0, "calibrate: the rate must be > 0 bit/s, got ", rate_bits);
  KESTREL_CHECK(delay_us >= 0, "calibrate: the delay must be >= 0 us, got ", delay_us);
  // The delay's round trips come off each measurement first: what remains is the link without it.
  std::vector<CollectiveSample> without_delay = samples;
  for (CollectiveSample& s : without_delay) s.us -= allreduce_round_trips(s.world_size) * 2.0 * delay_us;
  const Link fitted = fit_link(without_delay);
  return {fitted.alpha_us, fitted.bytes_per_us / (rate_bits / 8 / 1e6)};
}

// A long link adds its delay to every round trip an all-reduce waits (simulator.h,
// allreduce_round_trips): with 2 ranks one, the group's single exchange; with more, Gloo's ring,
// two crossings per step, because its TCP transport sends a buffer only once the peer has
// announced the matching receive. The sweep measured both (docs/history/distributed.md). Not modelled:
// TCP's own response to the delay (slow start again after an idle moment, a window smaller than
// the bandwidth-delay product), which would cost more; the error at long delays shows it.
Link link_at(const Calibration& c, double rate_bits, double delay_us) {
  KESTREL_CHECK(rate_bits > 0, "link_at: the rate must be > 0 bit/s, got ", rate_bits);
  KESTREL_CHECK(delay_us >= 0, "link_at: the delay must be >= 0 us, got ", delay_us);
  return {c.alpha_us, c.wire_efficiency * rate_bits / 8 / 1e6, delay_us};
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

BandwidthReport bandwidth_report(const std::vector<Repetition>& reps, const std::string& calibrate_rate,
                                 double edge_bucket_mb, bool timed) {
  const int64_t edge_bytes = static_cast<int64_t>(edge_bucket_mb * kMiB);
  BandwidthReport report;
  report.calibrate_rate = calibrate_rate;
  const LinkSetting cal = parse_link_setting(calibrate_rate);

  // Calibration: every bucket all-reduced alone at the calibration setting fits the link; compute
  // comes from the calibration repetition with the median backward (the no-overlap profile).
  std::vector<CollectiveSample> samples;
  std::vector<const Repetition*> cal_reps;
  for (const Repetition& r : reps)
    if (r.link() == cal) {
      cal_reps.push_back(&r);
      for (const AloneRow& a : r.alone) samples.push_back({a.bytes, a.world, a.us});
    }
  KESTREL_CHECK(!cal_reps.empty(), "overlap bandwidth --calibrate ", calibrate_rate,
                ": no runs at that setting (rate and delay); the measured settings are the directory names "
                "under --runs");
  report.calibration = calibrate(samples, cal.rate_bits, cal.delay_us);
  std::sort(cal_reps.begin(), cal_reps.end(), [](const Repetition* a, const Repetition* b) {
    return a->profile.backward_us < b->profile.backward_us;
  });
  const Profile& profile = cal_reps[cal_reps.size() / 2]->profile;

  // One group per setting: a rate measured with two delays is two settings.
  std::map<LinkSetting, std::vector<const Repetition*>, FastestFirst> by_setting;
  std::set<double> caps;
  for (const Repetition& r : reps) {
    by_setting[r.link()].push_back(&r);
    for (const TimelineRow& row : r.timeline) caps.insert(row.cap_mb);
  }
  for (const auto& [link_setting, group] : by_setting)
    for (double cap : caps)
      for (bool overlap : {false, true}) {
        SettingSummary s;
        s.rate = group.front()->rate;
        s.rate_bits = link_setting.rate_bits;
        s.delay_us = link_setting.delay_us;
        s.cap_mb = cap;
        s.overlap = overlap;
        std::vector<double> step, pre, backward, exposed, alone, eff, late, exposed_last, eff_last, matched;
        const Link link = link_at(report.calibration, s.rate_bits, s.delay_us);
        const int64_t cap_bytes = static_cast<int64_t>(cap * kMiB);
        for (const Repetition* r : group) {
          const RunMedians m = run_medians(r->timeline, cap, overlap);
          if (!m.found) continue;
          s.buckets = m.buckets;
          step.push_back(m.step_us);
          pre.push_back(m.pre_us);
          backward.push_back(m.backward_us);
          exposed.push_back(m.exposed_us);
          alone.push_back(alone_median_us(r->alone, cap));
          matched.push_back(
              simulate(with_compute(profile, m.pre_us, m.backward_us), cap_bytes, 2, link, overlap, edge_bytes, timed)
                  .step_us);
          if (overlap) eff.push_back(overlap_efficiency(alone.back(), m.backward_us, m.exposed_us));
          const PairMedians pm = pair_medians(r->timeline, r->peer_timeline, cap, overlap);
          if (!pm.found) continue;
          late.push_back(pm.peer_late_us);
          exposed_last.push_back(pm.exposed_after_last_us);
          if (overlap)
            eff_last.push_back(overlap_efficiency(alone.back(), pm.last_backward_us, pm.exposed_after_last_us));
        }
        if (step.empty()) continue;
        s.reps = static_cast<int>(step.size());
        s.step_us = spread(step);
        s.pre_us = spread(pre);
        s.backward_us = spread(backward);
        s.exposed_us = spread(exposed);
        s.alone_us = spread(alone);
        if (overlap) s.efficiency = spread(eff);
        s.both_ranks = late.size() == step.size();
        if (s.both_ranks) {
          s.peer_late_us = spread(late);
          s.exposed_after_last_us = spread(exposed_last);
          if (overlap) s.efficiency_after_last = spread(eff_last);
        }
        s.predicted_matched_step_us = median(matched);
        s.predicted_step_us = simulate(profile, cap_bytes, 2, link, overlap, edge_bytes, timed).step_us;
        // The all-reduce alone times the overlapped run's buckets.
        for (const SimBucket& b : timed ? make_timed_buckets(profile.grads, cap_bytes, edge_bytes, link, 2)
                                        : make_buckets(profile.grads, cap_bytes, edge_bytes))
          s.predicted_alone_us += ring_allreduce_us(b.bytes, 2, link);
        report.settings.push_back(s);
      }
  return report;
}

}  // namespace kestrel::bench::overlap
