#include "bench/kernels/bench_common.h"

#include <cuda_runtime.h>

#include <dnnl.h>

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
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

// This machine's CPU limits, measured once per process (issue 44: the limit beside every figure):
//   - arithmetic: register-only loops of independent multiply-adds on every thread, no memory in
//     the way, as a perfect kernel would run: float32 FMA (512-bit where AVX-512 is present, else
//     256-bit), bfloat16 dot products (vdpbf16ps, AVX-512 BF16) and int8 dot products (vpdpbusd,
//     AVX-512 VNNI) where the CPU has them;
//   - SGEMM through oneDNN (the library the CPU convolutions use): what a tuned kernel reaches;
//   - memory: a streaming copy of buffers far larger than the caches (bytes read + written).
// Best of several runs, so a busy moment does not lower them.
using Clock = std::chrono::steady_clock;
constexpr int kAcc = 12;  // independent accumulators: latency x pipes of every CPU here

__attribute__((target("avx512f"))) float fma512(int64_t iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(0.001f * k);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  float sum = 0;
  for (int k = 0; k < kAcc; ++k) sum += _mm512_reduce_add_ps(acc[k]);
  return sum;
}

__attribute__((target("avx2,fma"))) float fma256(int64_t iters) {
  __m256 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_set1_ps(0.001f * k);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  alignas(32) float out[8];
  float sum = 0;
  for (int k = 0; k < kAcc; ++k) {
    _mm256_store_ps(out, acc[k]);
    for (float v : out) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16(int64_t iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(0.001f * k);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3c00);  // bf16 0.0078125
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, a);
  float sum = 0;
  for (int k = 0; k < kAcc; ++k) sum += _mm512_reduce_add_ps(acc[k]);
  return sum;
}

__attribute__((target("avx512f,avx512vnni"))) float dpbusd(int64_t iters) {
  __m512i acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_epi32(k);
  const __m512i a = _mm512_set1_epi8(1);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, a);
  int64_t sum = 0;
  for (int k = 0; k < kAcc; ++k) sum += _mm512_reduce_add_epi32(acc[k]);
  return static_cast<float>(sum);
}

int peak_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Each measuring thread on a CPU of its own (the t-th the process may use): left to the
// scheduler, new threads start beside their parent and a short run may find two on one core.
void pin_to_cpu(int t) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (seen++ == t % std::max(1, CPU_COUNT(&allowed))) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      return;
    }
  }
}

// Operations per second of `loop` (ops_per_iter operations an iteration) run on every thread at
// once (one thread a CPU): best of 9 runs of a few hundredths of a second each.
double ops_per_second(float (*loop)(int64_t), double ops_per_iter) {
  const int threads = peak_threads();
  constexpr int64_t iters = 2'000'000;
  double best = 1e30;
  std::atomic<float> sink{0};
  for (int run = 0; run < 9; ++run) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        pin_to_cpu(t);
        sink = sink + loop(iters);
      });
    for (std::thread& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return threads * static_cast<double>(iters) * ops_per_iter / best;
}

CpuPeak measure_cpu_peak() {
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
  p.threads = peak_threads();
  if (__builtin_cpu_supports("avx512f")) {
    p.fma_flop_per_s = ops_per_second(fma512, kAcc * 16 * 2.0);
    p.fma_width = 512;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.fma_flop_per_s = ops_per_second(fma256, kAcc * 8 * 2.0);
    p.fma_width = 256;
  }
  if (__builtin_cpu_supports("avx512bf16"))  // 16 lanes x 2 products, each a multiply and an add
    p.bf16_flop_per_s = ops_per_second(dpbf16, kAcc * 16 * 2 * 2.0);
  if (__builtin_cpu_supports("avx512vnni"))  // 16 lanes x 4 byte products, multiply and add
    p.int8_op_per_s = ops_per_second(dpbusd, kAcc * 16 * 4 * 2.0);
  constexpr int64_t n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.f);
  const double gemm_s = best_of(6, [&] {
    dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  });
  p.sgemm_flop_per_s = 2.0 * n * n * n / gemm_s;
  if (p.fma_flop_per_s == 0) p.fma_flop_per_s = p.sgemm_flop_per_s;  // no FMA unit we know of
  const size_t bytes = size_t{256} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double copy_s = best_of(4, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  p.bytes_per_s = 2.0 * static_cast<double>(bytes) / copy_s;
  return p;
}

}  // namespace

const CpuPeak& cpu_peak() {
  static const CpuPeak measured = measure_cpu_peak();
  return measured;
}

DevicePeak device_peak(Device device) {
  DevicePeak p;
  if (device.is_cpu()) {
    p.name = "cpu";
    const CpuPeak& measured = cpu_peak();
    p.bandwidth_bytes_per_s = env_or("KESTREL_CPU_PEAK_GBS", measured.bytes_per_s / 1e9) * 1e9;
    p.fp32_flop_per_s = env_or("KESTREL_CPU_PEAK_GFLOPS", measured.fma_flop_per_s / 1e9) * 1e9;
    // bfloat16 work against the bf16 dot-product limit where the CPU has one.
    p.tensor_flop_per_s = measured.bf16_flop_per_s > 0 ? measured.bf16_flop_per_s : p.fp32_flop_per_s;
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
