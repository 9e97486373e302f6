// The machine's limits, once per sitting (issue 44): one row whose counters are the measured
// peaks every other row's share is taken against (bench_common.h, cpu_peak): float32 FMA, bfloat16
// and int8 dot products in register-only loops on every thread, oneDNN's SGEMM, a streaming copy.
#include <benchmark/benchmark.h>

#include "bench/kernels/bench_common.h"

namespace kestrel::bench {
namespace {

void BM_MachinePeak(benchmark::State& state) {
  const CpuPeak& p = cpu_peak();  // measured on first use
  for (auto _ : state) benchmark::DoNotOptimize(p.fma_flop_per_s);
  state.counters["machine_threads"] = p.threads;
  state.counters["machine_fma_bits"] = p.fma_width;
  state.counters["machine_fp32_fma_gflops"] = p.fma_flop_per_s / 1e9;
  state.counters["machine_bf16_dot_gflops"] = p.bf16_flop_per_s / 1e9;
  state.counters["machine_int8_dot_gops"] = p.int8_op_per_s / 1e9;
  state.counters["machine_sgemm_gflops"] = p.sgemm_flop_per_s / 1e9;
  state.counters["machine_copy_gbs"] = p.bytes_per_s / 1e9;
}
BENCHMARK(BM_MachinePeak)->Iterations(1);

}  // namespace
}  // namespace kestrel::bench
