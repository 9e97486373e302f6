// Copies at YOLOv5s shapes: a contiguous copy of the 80x80x128 P3 feature map (NHWC), the same
// map permuted to NCHW through contiguous() (the strided copy kernel), the Detect head's permute
// of the P3 output, and the upload of a batch of 640x640 RGB uint8 images from pinned and from
// pageable host memory.
#include <cstdlib>

#include "bench/kernels/bench_common.h"
#include "engine/tensor.h"

using namespace kestrel;

namespace {

constexpr int64_t kH = 80, kW = 80, kC = 128;

void BM_CopyContiguous(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", kH, "x", kW, "x", kC));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({s.batch, kH, kW, kC}, s.dtype, s.device);
  c.run([&] { x.clone(); });
  c.report_bytes(2.0 * x.numel() * x.element_size());
}

void BM_CopyPermuteToNCHW(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", kH, "x", kW, "x", kC));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({s.batch, kH, kW, kC}, s.dtype, s.device);
  Tensor nchw = x.permute({0, 3, 1, 2});
  c.run([&] { nchw.contiguous(); });
  c.report_bytes(2.0 * x.numel() * x.element_size());
}

// The Detect head's permute at P3: the conv's [B, 80, 80, 3 * 85] (NHWC) viewed as
// [B, 3, 80, 80, 85]; its backward is the inverse permute, of the same size.
void BM_CopyDetectPermute(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  constexpr int64_t kAnchors = 3, kOutputs = 85;
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", kH, "x", kW, "x", kAnchors * kOutputs));
  if (c.skipped()) return;
  Tensor x = Tensor::ones({s.batch, kH, kW, kAnchors * kOutputs}, s.dtype, s.device);
  Tensor view = x.reshape({s.batch, kH, kW, kAnchors, kOutputs}).permute({0, 3, 1, 2, 4});
  c.run([&] { view.contiguous(); });
  c.report_bytes(2.0 * x.numel() * x.element_size());
}

// {device, batch, dtype}: CUDA at batch 16 and 64 in float32 and bfloat16; the CPU at batch 1.
void Args(benchmark::internal::Benchmark* b) {
  b->Args({0, 1, 0});
  for (int64_t batch : {16, 64})
    for (int64_t dtype : {0, 1}) b->Args({1, batch, dtype});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

// A batch of 16 images at 640x640x3 uint8 (19.7 MB) to cuda:0. The limit here is the host link,
// not device memory: PCIe 5.0 x16 carries 63 GB/s each way (32 GT/s x 16 lanes x 128/130 / 8),
// overridable with KESTREL_H2D_PEAK_GBS for other links.
void host_to_device(benchmark::State& state, bool pinned) {
  const Device gpu = Device::cuda(0);
  bench::Case c(state, gpu, DType::U8, "16x640x640x3");
  if (c.skipped()) return;
  const Shape shape{16, 640, 640, 3};
  Tensor host = Tensor::empty(shape, DType::U8, Device::cpu(), pinned);
  host.fill_(7.0);
  Tensor dev = Tensor::empty(shape, DType::U8, gpu);
  c.run([&] { dev.copy_(host, /*non_blocking=*/true); });
  const char* peak = std::getenv("KESTREL_H2D_PEAK_GBS");
  state.counters["bytes_per_s"] = benchmark::Counter(static_cast<double>(host.numel()),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_bytes_per_s"] = (peak ? std::atof(peak) : 63.0) * 1e9;
}

// Pinned memory: one DMA straight from the buffer, asynchronous on the stream.
void BM_HostToDevicePinned(benchmark::State& state) { host_to_device(state, true); }
// Pageable memory: the driver stages through its own pinned buffers, and the copy is synchronous.
void BM_HostToDevicePageable(benchmark::State& state) { host_to_device(state, false); }

}  // namespace

BENCHMARK(BM_CopyContiguous)->Apply(Args);
BENCHMARK(BM_CopyPermuteToNCHW)->Apply(Args);
BENCHMARK(BM_CopyDetectPermute)->Apply(Args);
BENCHMARK(BM_HostToDevicePinned)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_HostToDevicePageable)->UseManualTime()->Unit(benchmark::kMillisecond);
