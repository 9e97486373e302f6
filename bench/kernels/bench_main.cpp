// main() of the kernel benchmarks: Google Benchmark's flags, plus one JSON line per result on
// stdout (name, shape, dtype, device, time, throughput, % of the hardware limit). The usual
// --benchmark_format=json and --benchmark_out=FILE still work.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "base/openmp_wait.h"

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// "shape=1x2 dtype=f32 device=cpu" -> value of key.
std::string label_field(const std::string& label, const std::string& key) {
  size_t p = label.find(key + "=");
  if (p == std::string::npos) return "";
  p += key.size() + 1;
  size_t e = label.find(' ', p);
  return label.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

class JsonLinesReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) {
        std::printf("{\"name\":\"%s\",\"skipped\":\"%s\"}\n", escape(r.benchmark_name()).c_str(),
                    escape(r.error_message).c_str());
        continue;
      }
      const double seconds = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      std::printf("{\"name\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",\"device\":\"%s\",\"time_ms\":%.4f",
                  escape(r.benchmark_name()).c_str(), label_field(r.report_label, "shape").c_str(),
                  label_field(r.report_label, "dtype").c_str(),
                  label_field(r.report_label, "device").c_str(), seconds * 1e3);
      auto counter = [&](const char* name) -> double {
        auto it = r.counters.find(name);
        return it == r.counters.end() ? 0.0 : static_cast<double>(it->second);
      };
      if (double bw = counter("bytes_per_s"); bw > 0) {
        std::printf(",\"gb_per_s\":%.2f", bw / 1e9);
        if (double peak = counter("peak_bytes_per_s"); peak > 0)
          std::printf(",\"pct_peak_bandwidth\":%.1f", 100.0 * bw / peak);
      }
      if (double fl = counter("flop_per_s"); fl > 0) {
        std::printf(",\"tflop_per_s\":%.3f", fl / 1e12);
        if (double peak = counter("peak_flop_per_s"); peak > 0)
          std::printf(",\"pct_peak_flops\":%.1f", 100.0 * fl / peak);
      }
      if (double ips = counter("images_per_s"); ips > 0) std::printf(",\"images_per_s\":%.1f", ips);
      // Breakdowns (a stage's milliseconds, a part's share) as each benchmark names them, and the
      // machine's measured limits (peak_bench.cpp).
      for (const auto& [name, value] : r.counters)
        if (name.ends_with("_ms") || name.ends_with("_share") || name.starts_with("machine_"))
          std::printf(",\"%s\":%.3f", escape(name).c_str(), static_cast<double>(value));
      if (std::string algo = label_field(r.report_label, "algo"); !algo.empty())
        std::printf(",\"algo\":\"%s\"", escape(algo).c_str());
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  kestrel::settle_openmp_wait(argv);  // before any thread: libgomp reads it when it loads
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  JsonLinesReporter lines;
  benchmark::RunSpecifiedBenchmarks(&lines);
  benchmark::Shutdown();
  return 0;
}
