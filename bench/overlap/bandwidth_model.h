// The arithmetic of `overlap bandwidth` (bench/dist/overlap_bandwidth.sh): link settings (tc rate,
// one-way delay), the overlap efficiency docs/history/distributed.md defines, spreads over repetitions, the
// simulator's calibration on one link setting, and the report that summarises the repetitions and
// predicts every setting (bandwidth.h reads the files and prints it; here, it needs no files).
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/measure.h"
#include "bench/overlap/simulator.h"

namespace kestrel::bench::overlap {

// Bits per second of a tc rate: "1gbit", "500mbit", "64kbit", "1000bit" (decimal prefixes, as
// tc's). Anything else is refused, naming the text.
double parse_rate_bits(const std::string& rate);

// A link setting of the sweep: a tc rate, and the one-way delay the link adds in each direction
// (0: none).
struct LinkSetting {
  double rate_bits = 0;
  double delay_us = 0;
  bool operator==(const LinkSetting&) const = default;
};
// A setting's directory name, overlap_bandwidth.sh's RATE or RATE+DELAYms: "1gbit", "1gbit+0.2ms",
// "200mbit+5ms" (milliseconds, decimals allowed; "1gbit+0ms" is the link "1gbit" names). Anything
// else, a negative delay included, is refused, naming the text and the accepted form.
LinkSetting parse_link_setting(const std::string& name);
// The order of the tables and plots: rate fastest first, then delay smallest first.
struct FastestFirst {
  bool operator()(const LinkSetting& a, const LinkSetting& b) const {
    return a.rate_bits != b.rate_bits ? a.rate_bits > b.rate_bits : a.delay_us < b.delay_us;
  }
};

// How much of the communication that could hide behind backward did:
//   hideable = min(comm_alone, backward)
//   hidden   = comm_alone - exposed, clamped to [0, hideable]
//   efficiency = hidden / hideable (1 when nothing could hide)
// comm_alone: the step's buckets all-reduced with no compute running; backward: backward's
// duration in the overlapped step; exposed: the wait for gradients after backward in that step.
double overlap_efficiency(double comm_alone_us, double backward_us, double exposed_us);

// Median and range of repeated measurements.
struct Spread {
  double median = 0, lo = 0, hi = 0;
};
Spread spread(const std::vector<double>& values);

// The ring model fitted on one link setting: per-message latency without the link's delay (the
// software's and the wire's own), and the share of the nominal tc rate that all-reduce payload
// reaches (TCP/IP headers, the ring's idle moments).
struct Calibration {
  double alpha_us = 0;
  double wire_efficiency = 1;
};
// Fits alpha and bandwidth to buckets all-reduced alone over a link shaped to rate_bits with a
// one-way delay of delay_us, whose round trips it takes off the measurements first (link_at adds
// them back).
Calibration calibrate(const std::vector<CollectiveSample>& samples, double rate_bits, double delay_us = 0);
// The link the calibration predicts for another setting: wire_efficiency x the rate, the
// calibration's latency, and the setting's one-way delay (charged per round trip: simulator.h).
Link link_at(const Calibration& c, double rate_bits, double delay_us = 0);

// One repetition at one bucket cap with overlap on or off: medians over its timed steps (rows of
// timeline.csv, one per bucket and step).
struct RunMedians {
  bool found = false;
  int buckets = 0;
  double step_us = 0;      // forward, loss, backward and the wait for gradients
  double pre_us = 0;       // forward and loss
  double backward_us = 0;
  double exposed_us = 0;   // the wait for gradients after backward (finalize)
};
RunMedians run_medians(const std::vector<TimelineRow>& rows, double cap_mb, bool overlap);
// Both ranks' timelines of the same run (2 ranks; one steady clock on one machine): per step,
// how much later rank 1's backward ended than rank 0's (negative: earlier), and the wait left once
// the later of the two backwards had ended: the communication proper, without the time rank 0
// spent waiting for a slower peer. Medians over the steps; found is false without start times.
struct PairMedians {
  bool found = false;
  double peer_late_us = 0;
  double last_backward_us = 0;        // backward of the rank whose backward ended last
  double exposed_after_last_us = 0;   // latest finalize end - latest backward end
};
PairMedians pair_medians(const std::vector<TimelineRow>& rank0, const std::vector<TimelineRow>& rank1,
                         double cap_mb, bool overlap);

// The buckets of one cap all-reduced alone: the median over repetitions of their summed times;
// 0 when alone.csv has no row for the cap.
double alone_median_us(const std::vector<AloneRow>& rows, double cap_mb);

// The profile with its compute replaced by a run's own: forward and loss take pre_us, backward
// backward_us, and every gradient arrives at the same share of backward as in the profile. The
// simulator then predicts only the communication: the protocol that separates the link model's
// error from the compute that a shared machine gives one run and not another.
Profile with_compute(const Profile& profile, double pre_us, double backward_us);

// (predicted - measured) / measured.
double relative_error(double predicted, double measured);

// One repetition's files at one link setting: <runs>/<setting>/rep<k>/.
struct Repetition {
  std::string rate;  // the setting's directory name: "1gbit", "1gbit+0.2ms"
  double rate_bits = 0;
  double delay_us = 0;
  int rep = 0;
  std::string dir;
  std::vector<TimelineRow> timeline;
  std::vector<TimelineRow> peer_timeline;  // rank 1's (timeline_rank1.csv), empty when absent
  std::vector<AloneRow> alone;
  Profile profile;
  LinkSetting link() const { return {rate_bits, delay_us}; }
};

struct SettingSummary {
  std::string rate;  // the setting's directory name
  double rate_bits = 0;
  double delay_us = 0;
  double cap_mb = 0;
  bool overlap = false;
  int buckets = 0;
  int reps = 0;
  Spread step_us, pre_us, backward_us, exposed_us, alone_us;
  Spread efficiency;  // overlap on only (overlap_efficiency, per repetition)
  // From both ranks' timelines (pair_medians); both_ranks is false without them.
  bool both_ranks = false;
  Spread peer_late_us, exposed_after_last_us;
  Spread efficiency_after_last;  // overlap efficiency from the later backward's end
  double predicted_step_us = 0, predicted_alone_us = 0;
  // With each repetition's own measured compute (with_compute), the median.
  double predicted_matched_step_us = 0;
  LinkSetting link() const { return {rate_bits, delay_us}; }
};

struct BandwidthReport {
  std::string calibrate_rate;  // a setting's name, as parse_link_setting reads it
  Calibration calibration;
  // Settings in FastestFirst order, then caps, overlap off before on.
  std::vector<SettingSummary> settings;
};
// Summarises, calibrates the simulator on the repetitions of the setting calibrate_rate names
// (equal rate and delay: "1gbit" is not "1gbit+5ms"; their buckets alone for the link, the
// median-backward repetition's profile for compute) and predicts every setting.
// edge_bucket_mb: the runs' edge bucket cap, timed: whether they cut buckets by time (the
// simulator lays its buckets out as the Reducer did).
BandwidthReport bandwidth_report(const std::vector<Repetition>& reps, const std::string& calibrate_rate,
                                 double edge_bucket_mb, bool timed = false);

}  // namespace kestrel::bench::overlap
