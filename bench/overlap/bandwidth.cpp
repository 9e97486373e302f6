#include "bench/overlap/bandwidth.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/error.h"

namespace kestrel::bench::overlap {
namespace {

namespace fs = std::filesystem;

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
  for (const auto& setting_dir : fs::directory_iterator(runs_dir)) {
    if (!setting_dir.is_directory()) continue;
    for (const auto& rep_dir : fs::directory_iterator(setting_dir.path())) {
      const std::string name = rep_dir.path().filename().string();
      if (!rep_dir.is_directory() || name.rfind("rep", 0) != 0 || !fs::exists(rep_dir.path() / "timeline.csv"))
        continue;
      Repetition r;
      r.rate = setting_dir.path().filename().string();
      const LinkSetting link = parse_link_setting(r.rate);
      r.rate_bits = link.rate_bits;
      r.delay_us = link.delay_us;
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
                "' holds no <setting>/rep<k>/timeline.csv; run bench/dist/overlap_bandwidth.sh first");
  std::sort(out.begin(), out.end(), [](const Repetition& a, const Repetition& b) {
    if (a.link() != b.link()) return FastestFirst{}(a.link(), b.link());
    return a.rep < b.rep;
  });
  return out;
}

void print_bandwidth_report(const BandwidthReport& r) {
  const bool delays = std::any_of(r.settings.begin(), r.settings.end(), [](const SettingSummary& s) {
    return s.delay_us > 0;
  });
  std::printf("simulator calibrated on %s: alpha %.0f us%s, all-reduce payload at %.1f %% of the tc rate\n\n",
              r.calibrate_rate.c_str(), r.calibration.alpha_us, delays ? " plus 2 x the setting's one-way delay per round trip" : "",
              100 * r.calibration.wire_efficiency);
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
  std::vector<std::string> order;  // the settings' order (FastestFirst), not the names'
  for (size_t i = 0; i + 1 < r.settings.size(); i += 2) {
    const SettingSummary& off = r.settings[i];
    const SettingSummary& on = r.settings[i + 1];
    if (off.overlap || !on.overlap) continue;
    const double e_off = relative_error(off.predicted_step_us, off.step_us.median);
    const double e_on = relative_error(on.predicted_step_us, on.step_us.median);
    const double m_off = relative_error(off.predicted_matched_step_us, off.step_us.median);
    const double m_on = relative_error(on.predicted_matched_step_us, on.step_us.median);
    if (!errors.count(on.rate)) order.push_back(on.rate);
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
  const LinkSetting calibration = parse_link_setting(r.calibrate_rate);
  for (const std::string& rate : order)
    std::printf("| %s%s | %s | %s |\n", rate.c_str(),
                parse_link_setting(rate) == calibration ? " (calibration)" : "", stats(errors[rate]).c_str(),
                stats(matched_errors[rate]).c_str());
}

void write_bandwidth_csv(const BandwidthReport& r, const std::string& path) {
  std::ofstream out(path);
  KESTREL_CHECK(out, "overlap bandwidth: cannot write ", path);
  out << "rate,rate_bits,delay_ms,cap_mb,overlap,buckets,reps,step_ms,step_lo_ms,step_hi_ms,pre_ms,backward_ms,"
         "exposed_ms,alone_ms,efficiency,efficiency_lo,efficiency_hi,predicted_step_ms,predicted_alone_ms,peer_late_ms,"
         "exposed_after_both_ms,efficiency_both,efficiency_both_lo,efficiency_both_hi,predicted_own_compute_step_ms\n";
  for (const SettingSummary& s : r.settings)
    out << s.rate << ',' << s.rate_bits << ',' << ms(s.delay_us) << ',' << s.cap_mb << ',' << s.overlap << ','
        << s.buckets << ',' << s.reps << ',' << ms(s.step_us.median) << ',' << ms(s.step_us.lo) << ','
        << ms(s.step_us.hi) << ',' << ms(s.pre_us.median) << ',' << ms(s.backward_us.median) << ','
        << ms(s.exposed_us.median) << ',' << ms(s.alone_us.median) << ',' << s.efficiency.median << ','
        << s.efficiency.lo << ',' << s.efficiency.hi << ',' << ms(s.predicted_step_us) << ','
        << ms(s.predicted_alone_us) << ',' << ms(s.peer_late_us.median) << ',' << ms(s.exposed_after_last_us.median)
        << ',' << s.efficiency_after_last.median << ',' << s.efficiency_after_last.lo << ','
        << s.efficiency_after_last.hi << ',' << ms(s.predicted_matched_step_us) << '\n';
}

}  // namespace kestrel::bench::overlap
