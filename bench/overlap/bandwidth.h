// `overlap bandwidth`: the summary of bench/dist/overlap_bandwidth.sh's runs (two ranks in two
// network namespaces over a link shaped to each setting: a rate, and a one-way delay or none): per
// setting, bucket cap and overlap on/off the medians over repetitions and their range; overlap
// efficiency; the simulator calibrated on one setting, predicting every setting's step time
// (bandwidth_model.h's bandwidth_report); here the files it reads and writes, and its tables.
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/bandwidth_model.h"
#include "bench/overlap/measure.h"

namespace kestrel::bench::overlap {

// Every <runs>/<setting>/rep<k> directory with a timeline.csv (the setting: parse_link_setting's
// RATE or RATE+DELAYms), in FastestFirst order, then by repetition; refuses an empty tree, naming it.
std::vector<Repetition> load_runs(const std::string& runs_dir);

// Markdown tables on stdout: the measurements, and prediction against measurement.
void print_bandwidth_report(const BandwidthReport& report);
void write_bandwidth_csv(const BandwidthReport& report, const std::string& path);

}  // namespace kestrel::bench::overlap
