// The analysing half of `overlap`: fit the ring model to measured collectives and check its step
// time predictions against the measured runs (validate); predict larger clusters (scaling table).
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/measure.h"
#include "bench/overlap/simulator.h"

namespace kestrel::bench::overlap {

// The ring model's alpha and bandwidth, least-squares fitted to the no-overlap runs' per-bucket
// all-reduce times (every rank count together).
Link fit_measured_link(const std::vector<TimelineRow>& rows);

// Fits alpha and bandwidth to the no-overlap runs' per-bucket all-reduce times (every rank count
// together), then predicts each measured configuration's step time from its no-overlap backward
// timeline. Prints a table and a summary line; returns the fitted link.
Link validate(const std::vector<TimelineRow>& rows);

struct TableOptions {
  Network net;
  double compute_scale = 1.0;  // multiplies the profile's compute times (e.g. 0.01 for a faster device)
  std::vector<double> caps_mb{0.25, 0.5, 1, 2, 4, 8, 16, 25, 50, 100};
  std::string csv_path;  // written when not empty
};

// Step time with and without overlap at the best bucket size, and scaling efficiency, for
// N = 2, 4, ..., 1024.
void scaling_table(const Profile& profile, const TableOptions& options);

}  // namespace kestrel::bench::overlap
