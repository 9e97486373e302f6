// overlap: how much DDP gradient communication hides behind backward, measured on a real Gloo
// process group on this machine, and extrapolated to clusters with a ring all-reduce model.
//
//   overlap [all]     measure with 2 and 3 processes, validate the model on them, print the table
//   overlap measure --nproc N      one measurement (appends to <out>/timeline.csv)
//   overlap validate               fit the ring model, predict the measured runs, print the error
//   overlap simulate [network]     scaling table from <out>/profile_w<first of --nproc-list>.csv
//   overlap bandwidth --runs DIR --calibrate 1gbit [--plots DIR] [--plot-cap 4] [--timeline-rate R]
//                                  summarise bench/dist/overlap_bandwidth.sh's runs (shaped links):
//                                  tables, DIR/summary.csv, the simulator's error, PNG plots; a
//                                  setting (--calibrate, --timeline-rate) is a rate or RATE+DELAYms,
//                                  as the directories under DIR are named (1gbit, 1gbit+0.2ms)
// Common flags: --model yolov5n --img-size 128 --batch-size 2 (per rank) --steps 6 --warmup 1
//   --buckets 1,2,4,8,25 (MB) --out overlap_out --nproc-list 2,3 --master-port P
//   --edge-bucket-mb 0.25 (the Reducer's first and last bucket cap; 0: off) --alone-reps 0 (worker:
//   time the buckets all-reduced with no compute, that many times per cap) --bucket-layout timed
//   (timed: the Reducer's default, cut by the second step's times; bytes: arrival order and the cap)
// Network (simulate/all; default: the link fitted to this machine's measurements):
//   --intra-gbps --inter-gbps (GB/s) --alpha-intra-us --alpha-inter-us --gpus-per-node 8
//   --compute-scale 1 (multiplies measured compute times, e.g. for a faster device)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "bench/overlap/bandwidth.h"
#include "bench/overlap/measure.h"
#include "bench/overlap/plots.h"
#include "bench/overlap/report.h"
#include "dist/launcher.h"
#include "dist/reducer.h"

namespace {

using namespace kestrel::bench::overlap;
using Flags = std::map<std::string, std::string>;

double number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  KESTREL_CHECK(false, "overlap --", flag, ": expected a number, got '", text, "'");
  return 0;
}

int integer(Flags& f, const std::string& flag) {
  const double v = number(flag, f[flag]);
  KESTREL_CHECK(v == static_cast<int>(v), "overlap --", flag, ": expected an integer, got '", f[flag], "'");
  return static_cast<int>(v);
}

std::vector<double> number_list(const std::string& flag, const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(number(flag, part));
  KESTREL_CHECK(!out.empty(), "overlap --", flag, ": empty list '", s, "'");
  return out;
}

MeasureOptions measure_options(Flags& f) {
  MeasureOptions o;
  o.model = f["model"];
  o.img_size = integer(f, "img-size");
  o.batch = integer(f, "batch-size");
  o.steps = integer(f, "steps");
  o.warmup = integer(f, "warmup");
  o.caps_mb = number_list("buckets", f["buckets"]);
  for (double cap : o.caps_mb) KESTREL_CHECK(cap > 0, "overlap --buckets: sizes must be > 0 MB, got ", cap);
  o.out_dir = f["out"];
  o.alone_reps = f.count("alone-reps") ? integer(f, "alone-reps") : 0;
  o.edge_bucket_mb = f.count("edge-bucket-mb") ? number("edge-bucket-mb", f["edge-bucket-mb"])
                                               : kestrel::dist::kDefaultEdgeBucketCapMb;
  KESTREL_CHECK(o.edge_bucket_mb >= 0, "overlap --edge-bucket-mb: must be >= 0 (0: no edge buckets), got ",
                o.edge_bucket_mb);
  const std::string layout = f.count("bucket-layout") ? f["bucket-layout"] : "timed";
  KESTREL_CHECK(layout == "timed" || layout == "bytes", "overlap --bucket-layout: timed or bytes, got '", layout,
                "'");
  o.timed_buckets = layout == "timed";
  KESTREL_CHECK(o.alone_reps >= 0, "overlap --alone-reps: must be >= 0, got ", o.alone_reps);
  KESTREL_CHECK(o.steps > 0 && o.warmup >= 0 && o.batch > 0 && o.img_size > 0,
                "overlap: --steps, --batch-size and --img-size must be > 0, --warmup >= 0");
  return o;
}

// Starts nproc workers of this program (one Gloo rank each) and waits for them.
int measure(Flags& f, int nproc) {
  KESTREL_CHECK(nproc >= 2, "overlap measure: --nproc must be >= 2, got ", nproc);
  kestrel::dist::LaunchOptions l;
  l.nproc_per_node = nproc;
  // Per-run ports: other jobs on this machine may hold the default one.
  l.master_port = f.count("master-port") ? integer(f, "master-port") : 29600 + (getpid() % 2000) * 3 + nproc;
  l.log_dir = f["out"];
  std::filesystem::create_directories(l.log_dir);
  l.command = {kestrel::dist::current_executable().string(), "worker"};
  for (const char* k : {"model", "img-size", "batch-size", "steps", "warmup", "buckets", "out", "edge-bucket-mb",
                        "bucket-layout"}) {
    if (!f.count(k)) continue;
    l.command.push_back(std::string("--") + k);
    l.command.push_back(f[k]);
  }
  const kestrel::dist::LaunchResult r = kestrel::dist::launch_workers(l);
  return r.exit_code;
}

kestrel::bench::overlap::Link link_from_flags(Flags& f, const char* gbps, const char* alpha,
                                              const kestrel::bench::overlap::Link& fallback) {
  kestrel::bench::overlap::Link link = fallback;
  if (f.count(gbps)) link.bytes_per_us = number(gbps, f[gbps]) * 1e9 / 1e6;
  if (f.count(alpha)) link.alpha_us = number(alpha, f[alpha]);
  KESTREL_CHECK(link.bytes_per_us > 0 && link.alpha_us >= 0, "overlap --", gbps, " must be > 0 and --", alpha,
                " >= 0");
  return link;
}

void simulate_from(Flags& f, const kestrel::bench::overlap::Link& fallback) {
  TableOptions t;
  t.net.intra = link_from_flags(f, "intra-gbps", "alpha-intra-us", fallback);
  t.net.inter = link_from_flags(f, "inter-gbps", "alpha-inter-us", fallback);
  t.net.gpus_per_node = f.count("gpus-per-node") ? integer(f, "gpus-per-node") : 8;
  t.compute_scale = f.count("compute-scale") ? number("compute-scale", f["compute-scale"]) : 1.0;
  KESTREL_CHECK(t.net.gpus_per_node >= 1 && t.compute_scale > 0,
                "overlap: --gpus-per-node must be >= 1 and --compute-scale > 0");
  t.csv_path = f["out"] + "/scaling.csv";
  const int world = static_cast<int>(number_list("nproc-list", f["nproc-list"]).front());
  const std::string profile = f.count("profile") ? f["profile"] : f["out"] + "/profile_w" + std::to_string(world) + ".csv";
  scaling_table(read_profile_csv(profile), t);
  std::printf("wrote %s\n", t.csv_path.c_str());
}

int bandwidth(Flags& f) {
  KESTREL_CHECK(f.count("runs") && f.count("calibrate"),
                "overlap bandwidth: give --runs DIR (bench/dist/overlap_bandwidth.sh's OUT) and --calibrate SETTING "
                "(a rate or RATE+DELAYms, e.g. 1gbit)");
  const std::vector<Repetition> reps = load_runs(f["runs"]);
  const MeasureOptions o = measure_options(f);
  const BandwidthReport report = bandwidth_report(reps, f["calibrate"], o.edge_bucket_mb, o.timed_buckets);
  print_bandwidth_report(report);
  write_bandwidth_csv(report, f["runs"] + "/summary.csv");
  if (!f.count("plots")) return 0;
  const std::string dir = f["plots"];
  std::filesystem::create_directories(dir);
  const double cap = f.count("plot-cap") ? number("plot-cap", f["plot-cap"]) : 4.0;
  // A sweep of delays alone has no rate plot: its rates all carry a delay.
  const auto no_delay = [](const SettingSummary& s) { return s.delay_us == 0; };
  if (std::any_of(report.settings.begin(), report.settings.end(), no_delay))
    plot_step_vs_bandwidth(report, cap, dir + "/overlap_step_vs_bandwidth.png");
  else
    std::printf("\nno settings without added delay: no plot against the rate\n");
  if (!std::all_of(report.settings.begin(), report.settings.end(), no_delay) &&
      !plot_step_vs_delay(report, cap, dir + "/overlap_step_vs_delay.png"))
    std::printf("\nno rate measured both without delay and with one at %g MB buckets: no plot against the delay\n",
                cap);
  plot_overlap_vs_bucket(report, dir + "/overlap_vs_bucket.png");
  // The timeline: of all overlapped steps at that setting and cap, the one whose wait for gradients
  // is the median (a typical step, not a stalled one).
  const std::string setting = f.count("timeline-rate") ? f["timeline-rate"] : f["calibrate"];
  const LinkSetting link = parse_link_setting(setting);
  std::vector<std::tuple<double, const Repetition*, int>> steps;
  for (const Repetition& r : reps)
    if (r.link() == link)
      for (const TimelineRow& row : r.timeline)
        if (row.cap_mb == cap && row.overlap && row.bucket == 0)
          steps.emplace_back(row.finalize_us - row.backward_us, &r, row.step);
  KESTREL_CHECK(!steps.empty(), "overlap bandwidth: no overlapped steps at ", setting, " and ", cap,
                " MB to draw");
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  const auto& [wait, r, step] = steps[steps.size() / 2];
  char title[160];
  std::snprintf(title, sizeof title, "One overlapped step at %s, %g MB buckets (%s, step %d)", r->rate.c_str(), cap,
                std::filesystem::path(r->dir).filename().c_str(), step);
  plot_step_timeline(r->timeline, r->peer_timeline, cap, step, title, dir + "/overlap_step_timeline.png");
  std::printf("\nwrote %s/summary.csv and the plots in %s\n", f["runs"].c_str(), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string command = "all";
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
      command = argv[1];
      first = 2;
    }
    Flags f{{"model", "yolov5n"}, {"img-size", "128"}, {"batch-size", "2"}, {"steps", "6"},
            {"warmup", "1"},      {"buckets", "1,2,4,8,25"}, {"out", "overlap_out"}, {"nproc-list", "2,3"}};
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      KESTREL_CHECK(a.rfind("--", 0) == 0 && i + 1 < argc, "overlap: expected '--flag value', got '", a,
                    "' (see the comment at the top of bench/overlap/main.cpp)");
      static const std::set<std::string> known{
          "model",     "img-size",   "batch-size", "steps",          "warmup",         "buckets",
          "out",       "nproc-list", "nproc",      "master-port",    "intra-gbps",     "inter-gbps",
          "profile",   "gpus-per-node",            "alpha-intra-us", "alpha-inter-us", "compute-scale",
          "alone-reps", "runs",      "calibrate",  "plots",          "plot-cap",       "timeline-rate",
          "edge-bucket-mb", "bucket-layout"};
      KESTREL_CHECK(known.count(a.substr(2)), "overlap: unknown flag ", a,
                    " (see the comment at the top of bench/overlap/main.cpp)");
      f[a.substr(2)] = argv[++i];
    }
    if (command == "worker") return run_measure_worker(measure_options(f));
    if (command == "bandwidth") return bandwidth(f);
    measure_options(f);  // checks the flags before anything starts
    const std::string timeline = f["out"] + "/timeline.csv";
    if (command == "measure") return measure(f, f.count("nproc") ? integer(f, "nproc") : 2);
    if (command == "validate") {
      validate(read_timeline_csv(timeline));
      return 0;
    }
    if (command == "simulate") {
      const bool measured = std::filesystem::exists(timeline);
      KESTREL_CHECK(measured || (f.count("intra-gbps") && f.count("inter-gbps")), "overlap simulate: no ", timeline,
                    " to fit the network to; run `overlap measure` or give --intra-gbps and --inter-gbps");
      simulate_from(f, measured ? fit_measured_link(read_timeline_csv(timeline)) : Link{});
      return 0;
    }
    KESTREL_CHECK(command == "all", "overlap: unknown command '", command, "'; use all, measure, validate, simulate or bandwidth");
    std::filesystem::remove(timeline);  // a fresh measurement: validate reads every row
    for (double n : number_list("nproc-list", f["nproc-list"]))
      if (const int rc = measure(f, static_cast<int>(n)); rc != 0) return rc;
    const Link fitted = validate(read_timeline_csv(timeline));
    simulate_from(f, fitted);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
