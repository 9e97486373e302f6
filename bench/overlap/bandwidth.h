// `overlap bandwidth`: the summary of bench/dist/overlap_bandwidth.sh's runs (two ranks in two
// network namespaces over a veth shaped to each rate): per rate, bucket cap and overlap on/off the
// medians over repetitions and their range; overlap efficiency (bandwidth_model.h); the simulator
// calibrated on one rate, predicting every setting's step time; tables and plots.
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/bandwidth_model.h"
#include "bench/overlap/measure.h"

namespace kestrel::bench::overlap {

// One repetition's files at one rate: <runs>/<rate>/rep<k>/.
struct Repetition {
  std::string rate;
  double rate_bits = 0;
  int rep = 0;
  std::string dir;
  std::vector<TimelineRow> timeline;
  std::vector<TimelineRow> peer_timeline;  // rank 1's (timeline_rank1.csv), empty when absent
  std::vector<AloneRow> alone;
  Profile profile;
};
// Every <runs>/<rate>/rep<k> directory with a timeline.csv; refuses an empty tree, naming it.
std::vector<Repetition> load_runs(const std::string& runs_dir);

struct SettingSummary {
  std::string rate;
  double rate_bits = 0;
  double cap_mb = 0;
  bool overlap = false;
  int buckets = 0;
  int reps = 0;
  Spread step_us, pre_us, backward_us, exposed_us, alone_us;
  Spread efficiency;  // overlap on only (bandwidth_model.h's definition, per repetition)
  // From both ranks' timelines (bandwidth_model.h's pair_medians); both_ranks is false without them.
  bool both_ranks = false;
  Spread peer_late_us, exposed_after_last_us;
  Spread efficiency_after_last;  // overlap efficiency from the later backward's end
  double predicted_step_us = 0, predicted_alone_us = 0;
  // With each repetition's own measured compute (bandwidth_model.h's with_compute), the median.
  double predicted_matched_step_us = 0;
};

struct BandwidthReport {
  std::string calibrate_rate;
  Calibration calibration;
  std::vector<SettingSummary> settings;  // rates fastest first, then caps, overlap off before on
};
// Summarises, calibrates the simulator on calibrate_rate's repetitions (their buckets alone for
// the link, the median-backward repetition's profile for compute) and predicts every setting.
// edge_bucket_mb: the runs' edge bucket cap, timed: whether they cut buckets by time (the
// simulator lays its buckets out as the Reducer did).
BandwidthReport bandwidth_report(const std::vector<Repetition>& reps, const std::string& calibrate_rate,
                                 double edge_bucket_mb, bool timed = false);
// Markdown tables on stdout: the measurements, and prediction against measurement.
void print_bandwidth_report(const BandwidthReport& report);
void write_bandwidth_csv(const BandwidthReport& report, const std::string& path);

}  // namespace kestrel::bench::overlap
