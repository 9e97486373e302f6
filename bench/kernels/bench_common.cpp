#include "bench/kernels/bench_common.h"

#include <cuda_runtime.h>

#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/stream.h"
#include "kernels/cuda_check.h"

namespace kestrel::bench {
namespace {

double env_or(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v ? std::atof(v) : fallback;
}

// Published dense peaks divided by (SM count x boost clock), i.e. FLOP per SM per clock:
//   sm_90 H100 SXM: 989 TFLOP/s bf16 / (132 SMs x 1.83 GHz) = 4096; fp32 67 TFLOP/s -> 256.
//   sm_80 A100:     312 TFLOP/s bf16 / (108 SMs x 1.41 GHz) = 2048; fp32 19.5 TFLOP/s -> 128.
//   sm_86 / sm_89:  512 tensor, 256 fp32.
// The device's own SM count and clock then give its peak (an H200 has the H100's SMs and clock).
struct ArchRate {
  int major, minor;
  double tensor_flop_per_sm_clock, fp32_flop_per_sm_clock;
};
constexpr ArchRate kRates[] = {
    {9, 0, 4096, 256},
    {8, 0, 2048, 128},
    {8, 6, 512, 256},
    {8, 9, 512, 256},
};

// This machine's CPU limits, measured once per process: SGEMM through oneDNN (the library the
// CPU convolutions use) on OpenMP's threads, and a streaming copy of buffers far larger than the
// caches (bytes read + written). Best of several runs, so a busy moment does not lower them.
struct CpuPeak {
  double flop_per_s = 0, bytes_per_s = 0;
};

CpuPeak measure_cpu_peak() {
  using Clock = std::chrono::steady_clock;
  auto best_of = [](int runs, auto&& fn) {
    double best = 1e30;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = Clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  };
  CpuPeak p;
  constexpr int64_t n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.f);
  const double gemm_s = best_of(6, [&] {
    dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  });
  p.flop_per_s = 2.0 * n * n * n / gemm_s;
  const size_t bytes = size_t{256} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double copy_s = best_of(4, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  p.bytes_per_s = 2.0 * static_cast<double>(bytes) / copy_s;
  return p;
}

}  // namespace

DevicePeak device_peak(Device device) {
  DevicePeak p;
  if (device.is_cpu()) {
    p.name = "cpu";
    static const CpuPeak measured = measure_cpu_peak();
    p.bandwidth_bytes_per_s = env_or("KESTREL_CPU_PEAK_GBS", measured.bytes_per_s / 1e9) * 1e9;
    p.fp32_flop_per_s = env_or("KESTREL_CPU_PEAK_GFLOPS", measured.flop_per_s / 1e9) * 1e9;
    p.tensor_flop_per_s = p.fp32_flop_per_s;
    return p;
  }
  cudaDeviceProp prop{};
  KESTREL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  p.name = prop.name;
  int mem_clock_khz = 0, bus_width_bits = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device.index);
  cudaDeviceGetAttribute(&bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, device.index);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device.index);
  // Double data rate: two transfers per memory clock.
  p.bandwidth_bytes_per_s = 2.0 * mem_clock_khz * 1e3 * (bus_width_bits / 8.0);
  for (const ArchRate& r : kRates) {
    if (r.major == prop.major && r.minor == prop.minor) {
      const double sm_clock = prop.multiProcessorCount * clock_khz * 1e3;
      p.tensor_flop_per_s = r.tensor_flop_per_sm_clock * sm_clock;
      p.fp32_flop_per_s = r.fp32_flop_per_sm_clock * sm_clock;
    }
  }
  return p;
}

Case::Case(benchmark::State& state, Device device, DType dtype, const std::string& shape)
    : state_(state), device_(device), dtype_(dtype) {
  if (device.is_cuda() && !cuda_available()) {
    skipped_ = true;
    state.SkipWithError("no CUDA device");
    return;
  }
  label_ = str("shape=", shape, " dtype=", dtype_name(dtype), " device=", device.str());
  state.SetLabel(label_);
}

void Case::add_label(const std::string& key, const std::string& value) {
  label_ += str(" ", key, "=", value);
  state_.SetLabel(label_);
}

void Case::run(const std::function<void()>& fn) {
  fn();  // warm-up: allocator caches, cuDNN algorithm search
  if (device_.is_cuda()) {
    Stream stream = current_stream(device_);
    stream.synchronize();
    Event start(device_, true), stop(device_, true);
    for (auto _ : state_) {
      start.record(stream);
      fn();
      stop.record(stream);
      stop.synchronize();
      state_.SetIterationTime(start.elapsed_ms(stop) / 1e3);
    }
  } else {
    for (auto _ : state_) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      auto t1 = std::chrono::steady_clock::now();
      state_.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    }
  }
}

void Case::report_bytes(double bytes) {
  const DevicePeak peak = device_peak(device_);
  state_.counters["bytes_per_s"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state_.counters["peak_bytes_per_s"] = peak.bandwidth_bytes_per_s;
}

void Case::report_flops(double flops) {
  const DevicePeak peak = device_peak(device_);
  const bool tensor = dtype_ == DType::BF16 || dtype_ == DType::F16;
  state_.counters["flop_per_s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state_.counters["peak_flop_per_s"] = tensor ? peak.tensor_flop_per_s : peak.fp32_flop_per_s;
}

}  // namespace kestrel::bench
