// Helpers shared by the kernel benchmarks: device timing, hardware peaks, and the fields every
// result line carries (shape, dtype, device, throughput and % of the hardware limit).
//
// A benchmark body looks like:
//   static void BM_Silu(benchmark::State& state) {
//     kestrel::bench::Case c(state, device_from_arg(state.range(0)), DType::BF16, "1x320x320x32");
//     if (c.skipped()) return;
//     Tensor x = ...;
//     c.run([&] { ops::silu(x); });        // times on the device (CUDA events) or the host
//     c.report_bytes(2.0 * x.numel() * x.element_size());
//   }
// bench_main.cpp prints one JSON line per result.
#pragma once
#include <benchmark/benchmark.h>

#include <functional>
#include <string>

#include "base/dtype.h"
#include "engine/device.h"

namespace kestrel::bench {

// This machine's CPU limits, measured once per process (bench_common.cpp says how): float32 FMA,
// bfloat16 and int8 dot products in register-only loops on every thread (0 where the CPU lacks
// the instruction), oneDNN's SGEMM, and a streaming copy's bytes per second.
struct CpuPeak {
  int threads = 0;
  int fma_width = 0;  // 512 or 256 bits; 0: no FMA loop (fma_flop_per_s is then SGEMM's)
  double fma_flop_per_s = 0, bf16_flop_per_s = 0, int8_op_per_s = 0, sgemm_flop_per_s = 0;
  double bytes_per_s = 0;
};
const CpuPeak& cpu_peak();

// Peak figures of a device. CUDA: bandwidth from the memory clock and bus width reported by the
// driver; dense tensor-core and fp32 FLOP/s from the table in bench_common.cpp (by SM version and
// SM count, at the boost clock). CPU: cpu_peak()'s measured limits (fp32: the FMA loop; "tensor":
// the bf16 dot-product loop where present, else the FMA loop), overridden by the environment's
// KESTREL_CPU_PEAK_GBS / KESTREL_CPU_PEAK_GFLOPS.
struct DevicePeak {
  std::string name;
  double bandwidth_bytes_per_s = 0;
  double fp32_flop_per_s = 0;
  double tensor_flop_per_s = 0;  // bf16/fp16 dense tensor-core peak (== fp32 peak on the CPU)
};
DevicePeak device_peak(Device device);

// Device 0 = CPU, 1 = cuda:0 (benchmark arguments are integers).
inline Device device_from_arg(int64_t arg) { return arg == 0 ? Device::cpu() : Device::cuda(0); }
// DType 0 = float32, 1 = bfloat16.
inline DType dtype_from_arg(int64_t arg) { return arg == 0 ? DType::F32 : DType::BF16; }

// The arguments {device, batch, dtype} most benchmarks register first.
struct CommonArgs {
  Device device;
  int64_t batch;
  DType dtype;
};
inline CommonArgs common_args(const benchmark::State& state) {
  return {device_from_arg(state.range(0)), state.range(1), dtype_from_arg(state.range(2))};
}

class Case {
 public:
  Case(benchmark::State& state, Device device, DType dtype, const std::string& shape);
  // True (and the benchmark marked skipped) when the device is absent.
  bool skipped() const { return skipped_; }
  // Runs fn once to warm up, then once per benchmark iteration, timing each on the device.
  void run(const std::function<void()>& fn);
  // Throughput counters for one iteration's work; percentages use the device's peak.
  void report_bytes(double bytes_per_iteration);
  void report_flops(double flops_per_iteration);
  // Appends " key=value" to the result's label (bench_main prints known keys, e.g. algo).
  void add_label(const std::string& key, const std::string& value);

 private:
  benchmark::State& state_;
  Device device_;
  DType dtype_;
  std::string label_;
  bool skipped_ = false;
};

}  // namespace kestrel::bench
