// The arithmetic of `overlap bandwidth` (bench/dist/overlap_bandwidth.sh): tc rates, the overlap
// efficiency docs/distributed.md defines, spreads over repetitions, and the simulator's
// calibration on one link setting.
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/measure.h"
#include "bench/overlap/simulator.h"

namespace kestrel::bench::overlap {

// Bits per second of a tc rate: "1gbit", "500mbit", "64kbit", "1000bit" (decimal prefixes, as
// tc's). Anything else is refused, naming the text.
double parse_rate_bits(const std::string& rate);

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

// The ring model fitted on one link setting: per-message latency, and the share of the nominal tc
// rate that all-reduce payload reaches (TCP/IP headers, the ring's idle moments).
struct Calibration {
  double alpha_us = 0;
  double wire_efficiency = 1;
};
// Fits alpha and bandwidth to buckets all-reduced alone over a link shaped to rate_bits.
Calibration calibrate(const std::vector<CollectiveSample>& samples, double rate_bits);
// The link the calibration predicts for another rate: same latency, wire_efficiency x the rate.
Link link_at(const Calibration& c, double rate_bits);

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

}  // namespace kestrel::bench::overlap
