#include "bench/overlap/bandwidth.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "base/error.h"

namespace kestrel::bench::overlap {
namespace {

namespace fs = std::filesystem;

constexpr double kMiB = 1024.0 * 1024.0;

double ms(double us) { return us / 1e3; }

std::string ms_range(const Spread& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f (%.0f-%.0f)", ms(s.median), ms(s.lo), ms(s.hi));
  return buf;
}

}  // namespace

std::vector<Repetition> load_runs(const std::string& runs_dir) {
  KESTREL_CHECK(fs::is_directory(runs_dir), "overlap bandwidth: no directory '", runs_dir,
                "'; run bench/dist/overlap_bandwidth.sh (OUT=) first");
  std::vector<Repetition> out;
  for (const auto& rate_dir : fs::directory_iterator(runs_dir)) {
    if (!rate_dir.is_directory()) continue;
    for (const auto& rep_dir : fs::directory_iterator(rate_dir.path())) {
      const std::string name = rep_dir.path().filename().string();
      if (!rep_dir.is_directory() || name.rfind("rep", 0) != 0 || !fs::exists(rep_dir.path() / "timeline.csv"))
        continue;
      Repetition r;
      r.rate = rate_dir.path().filename().string();
      r.rate_bits = parse_rate_bits(r.rate);
      r.rep = std::stoi(name.substr(3));
      r.dir = rep_dir.path().string();
      r.timeline = read_timeline_csv(r.dir + "/timeline.csv");
      if (fs::exists(rep_dir.path() / "timeline_rank1.csv")) r.peer_timeline = read_timeline_csv(r.dir + "/timeline_rank1.csv");
      r.alone = read_alone_csv(r.dir + "/alone.csv");
      r.profile = read_profile_csv(r.dir + "/profile_w2.csv");
      out.push_back(std::move(r));
    }
  }
  KESTREL_CHECK(!out.empty(), "overlap bandwidth: '", runs_dir,
                "' holds no <rate>/rep<k>/timeline.csv; run bench/dist/overlap_bandwidth.sh first");
  std::sort(out.begin(), out.end(), [](const Repetition& a, const Repetition& b) {
    return a.rate_bits != b.rate_bits ? a.rate_bits > b.rate_bits : a.rep < b.rep;
  });
  return out;
}

BandwidthReport bandwidth_report(const std::vector<Repetition>& reps, const std::string& calibrate_rate,
                                 double edge_bucket_mb, bool timed) {
  const int64_t edge_bytes = static_cast<int64_t>(edge_bucket_mb * kMiB);
  BandwidthReport report;
  report.calibrate_rate = calibrate_rate;
  const double cal_bits = parse_rate_bits(calibrate_rate);

  // Calibration: every bucket all-reduced alone at the calibration rate fits the link; compute
  // comes from the calibration repetition with the median backward (the no-overlap profile).
  std::vector<CollectiveSample> samples;
  std::vector<const Repetition*> cal_reps;
  for (const Repetition& r : reps)
    if (r.rate_bits == cal_bits) {
      cal_reps.push_back(&r);
      for (const AloneRow& a : r.alone) samples.push_back({a.bytes, a.world, a.us});
    }
  KESTREL_CHECK(!cal_reps.empty(), "overlap bandwidth --calibrate ", calibrate_rate,
                ": no runs at that rate; measured rates are the directory names under --runs");
  report.calibration = calibrate(samples, cal_bits);
  std::sort(cal_reps.begin(), cal_reps.end(), [](const Repetition* a, const Repetition* b) {
    return a->profile.backward_us < b->profile.backward_us;
  });
  const Profile& profile = cal_reps[cal_reps.size() / 2]->profile;

  std::map<double, std::vector<const Repetition*>, std::greater<>> by_rate;
  std::map<double, std::string> rate_names;
  std::set<double> caps;
  for (const Repetition& r : reps) {
    by_rate[r.rate_bits].push_back(&r);
    rate_names[r.rate_bits] = r.rate;
    for (const TimelineRow& row : r.timeline) caps.insert(row.cap_mb);
  }
  for (const auto& [bits, group] : by_rate)
    for (double cap : caps)
      for (bool overlap : {false, true}) {
        SettingSummary s;
        s.rate = rate_names[bits];
        s.rate_bits = bits;
        s.cap_mb = cap;
        s.overlap = overlap;
        std::vector<double> step, pre, backward, exposed, alone, eff, late, exposed_last, eff_last, matched;
        const Link link = link_at(report.calibration, bits);
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

void print_bandwidth_report(const BandwidthReport& r) {
  std::printf("simulator calibrated on %s: alpha %.0f us, all-reduce payload at %.1f %% of the tc rate\n\n",
              r.calibrate_rate.c_str(), r.calibration.alpha_us, 100 * r.calibration.wire_efficiency);
  std::printf("Measured, ms: median over repetitions (range)\n\n");
  std::printf("| rate | cap MB | buckets | all-reduce alone | backward | step, overlap off | step, overlap on | "
              "exposed, on | overlap efficiency | peer's backward ends later by | exposed after both backwards | "
              "efficiency, both ranks |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i + 1 < r.settings.size(); i += 2) {
    const SettingSummary& off = r.settings[i];
    const SettingSummary& on = r.settings[i + 1];
    if (off.overlap || !on.overlap) continue;
    char eff[64];
    std::snprintf(eff, sizeof eff, "%.0f %% (%.0f-%.0f)", 100 * on.efficiency.median, 100 * on.efficiency.lo,
                  100 * on.efficiency.hi);
    char both[64] = "-";
    if (on.both_ranks)
      std::snprintf(both, sizeof both, "%.0f %% (%.0f-%.0f)", 100 * on.efficiency_after_last.median,
                    100 * on.efficiency_after_last.lo, 100 * on.efficiency_after_last.hi);
    std::printf("| %s | %g | %d | %s | %s | %s | %s | %s | %s%s | %s | %s | %s |\n", on.rate.c_str(), on.cap_mb,
                on.buckets, ms_range(on.alone_us).c_str(), ms_range(on.backward_us).c_str(),
                ms_range(off.step_us).c_str(), ms_range(on.step_us).c_str(), ms_range(on.exposed_us).c_str(), eff,
                on.backward_us.median >= on.alone_us.median ? "" : " ¹",
                on.both_ranks ? ms_range(on.peer_late_us).c_str() : "-",
                on.both_ranks ? ms_range(on.exposed_after_last_us).c_str() : "-", both);
  }
  std::printf("\n¹ backward shorter than the all-reduce alone: the goal (>= 90 %%) does not apply.\n\n");
  std::printf("Simulator (calibrated on %s) against measurement, step time in ms\n\n", r.calibrate_rate.c_str());
  std::printf("Columns 4-5: compute from the calibration runs' profile; 6-7: each run's own measured compute (forward "
              "and backward times), so that the error is the link model's.\n\n");
  std::printf("| rate | cap MB | all-reduce alone: predicted / measured | overlap off: predicted / measured (error) | "
              "overlap on: predicted / measured (error) | off, own compute | on, own compute |\n"
              "|---|---|---|---|---|---|---|\n");
  std::map<std::string, std::vector<double>> errors, matched_errors;
  for (size_t i = 0; i + 1 < r.settings.size(); i += 2) {
    const SettingSummary& off = r.settings[i];
    const SettingSummary& on = r.settings[i + 1];
    if (off.overlap || !on.overlap) continue;
    const double e_off = relative_error(off.predicted_step_us, off.step_us.median);
    const double e_on = relative_error(on.predicted_step_us, on.step_us.median);
    const double m_off = relative_error(off.predicted_matched_step_us, off.step_us.median);
    const double m_on = relative_error(on.predicted_matched_step_us, on.step_us.median);
    errors[on.rate].push_back(std::abs(e_off));
    errors[on.rate].push_back(std::abs(e_on));
    matched_errors[on.rate].push_back(std::abs(m_off));
    matched_errors[on.rate].push_back(std::abs(m_on));
    std::printf("| %s | %g | %.0f / %.0f | %.0f / %.0f (%+.1f %%) | %.0f / %.0f (%+.1f %%) | %.0f (%+.1f %%) | "
                "%.0f (%+.1f %%) |\n",
                on.rate.c_str(), on.cap_mb, ms(on.predicted_alone_us), ms(on.alone_us.median),
                ms(off.predicted_step_us), ms(off.step_us.median), 100 * e_off, ms(on.predicted_step_us),
                ms(on.step_us.median), 100 * e_on, ms(off.predicted_matched_step_us), 100 * m_off,
                ms(on.predicted_matched_step_us), 100 * m_on);
  }
  auto stats = [](const std::vector<double>& e) {
    double sum = 0;
    for (double v : e) sum += v;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f %% | %.1f %%", 100 * sum / static_cast<double>(e.size()),
                  100 * *std::max_element(e.begin(), e.end()));
    return std::string(buf);
  };
  std::printf("\n| rate | mean abs error | max abs error | mean abs error, own compute | max, own compute |\n"
              "|---|---|---|---|---|\n");
  for (const auto& [rate, e] : errors)
    std::printf("| %s%s | %s | %s |\n", rate.c_str(),
                parse_rate_bits(rate) == parse_rate_bits(r.calibrate_rate) ? " (calibration)" : "", stats(e).c_str(),
                stats(matched_errors[rate]).c_str());
}

void write_bandwidth_csv(const BandwidthReport& r, const std::string& path) {
  std::ofstream out(path);
  KESTREL_CHECK(out, "overlap bandwidth: cannot write ", path);
  out << "rate,rate_bits,cap_mb,overlap,buckets,reps,step_ms,step_lo_ms,step_hi_ms,pre_ms,backward_ms,exposed_ms,"
         "alone_ms,efficiency,efficiency_lo,efficiency_hi,predicted_step_ms,predicted_alone_ms,peer_late_ms,"
         "exposed_after_both_ms,efficiency_both,efficiency_both_lo,efficiency_both_hi,predicted_own_compute_step_ms\n";
  for (const SettingSummary& s : r.settings)
    out << s.rate << ',' << s.rate_bits << ',' << s.cap_mb << ',' << s.overlap << ',' << s.buckets << ',' << s.reps
        << ',' << ms(s.step_us.median) << ',' << ms(s.step_us.lo) << ',' << ms(s.step_us.hi) << ','
        << ms(s.pre_us.median) << ',' << ms(s.backward_us.median) << ',' << ms(s.exposed_us.median) << ','
        << ms(s.alone_us.median) << ',' << s.efficiency.median << ',' << s.efficiency.lo << ',' << s.efficiency.hi
        << ',' << ms(s.predicted_step_us) << ',' << ms(s.predicted_alone_us) << ',' << ms(s.peer_late_us.median)
        << ',' << ms(s.exposed_after_last_us.median) << ',' << s.efficiency_after_last.median << ','
        << s.efficiency_after_last.lo << ',' << s.efficiency_after_last.hi << ',' << ms(s.predicted_matched_step_us)
        << '\n';
}

}  // namespace kestrel::bench::overlap
