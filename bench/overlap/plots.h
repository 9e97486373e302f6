// The charts of docs/history/distributed.md's overlap section, drawn with the run directory's plotting
// code (yolo/plot/plot_canvas.h): step time against bandwidth and against the link's delay, overlap
// efficiency against bucket size, and one overlapped step's timeline.
#pragma once
#include <string>
#include <vector>

#include "bench/overlap/bandwidth.h"

namespace kestrel::bench::overlap {

// Step time with overlap off and on (measured: medians with their range; predicted: dotted), the
// all-reduce alone and backward, against the link's rate, at bucket cap cap_mb: the settings
// without added delay (refused when there are none at that cap).
void plot_step_vs_bandwidth(const BandwidthReport& report, double cap_mb, const std::string& png_path);
// Step time with overlap off and on (as above) against the link's one-way delay at cap_mb, one pair
// of lines per rate measured without delay and with at least one; false, drawing nothing, when no
// rate was.
bool plot_step_vs_delay(const BandwidthReport& report, double cap_mb, const std::string& png_path);
// Overlap efficiency (median and range over repetitions) against the bucket cap, one line per
// setting (rate and delay).
void plot_overlap_vs_bucket(const BandwidthReport& report, const std::string& png_path);
// One step of timeline.csv (cap, overlap on): forward, backward and the wait on rank 0's compute
// row, each bucket's all-reduce (launch to done) on the communication row, readiness as ticks;
// rank 1's compute below where peer_rows (timeline_rank1.csv) has the step with start times.
void plot_step_timeline(const std::vector<TimelineRow>& rows, const std::vector<TimelineRow>& peer_rows,
                        double cap_mb, int step, const std::string& title, const std::string& png_path);

}  // namespace kestrel::bench::overlap
