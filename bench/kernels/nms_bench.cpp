// NMS on one YOLOv5 640x640 output per image (25200 boxes, 80 classes) at the two settings the
// reference uses: validation (conf 0.001, IoU 0.6, multi-label: millions of candidates, cut to
// max_nms 30000) and detection (conf 0.25, IoU 0.45, best class). Scores follow a trained
// model's shape: objectness mostly near zero (u^6), class scores skewed low (u^3), boxes of
// 8-200 px anywhere. NMS is bound by sorting and the IoU masks, not by bandwidth: the bytes
// reported are the predictions read once, to put the time in proportion. The CUDA pipeline
// includes its one host read of the candidate counts (as yolo::non_max_suppression does).
#include <algorithm>
#include <random>

#include "bench/kernels/bench_common.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "kernels/nms.h"

using namespace kestrel;

namespace {

constexpr int64_t kBoxes = 25200, kClasses = 80, kNo = 5 + kClasses;

Tensor predictions(int64_t batch) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> v(batch * kBoxes * kNo);
  for (int64_t i = 0; i < batch * kBoxes; ++i) {
    float* r = &v[i * kNo];
    r[0] = 640 * u(rng), r[1] = 640 * u(rng);
    r[2] = 8 + 192 * u(rng), r[3] = 8 + 192 * u(rng);
    r[4] = std::pow(u(rng), 6.0f);
    for (int64_t j = 0; j < kClasses; ++j) r[5 + j] = std::pow(u(rng), 3.0f);
  }
  return Tensor::from_vector(v, {batch, kBoxes, kNo});
}

kernels::NmsParams params(bool val) {
  kernels::NmsParams p;
  p.conf_thres = val ? 0.001 : 0.25;
  p.iou_thres = val ? 0.6 : 0.45;
  p.multi_label = val;
  return p;
}

void run_cuda(const Tensor& x, const kernels::NmsShape& s, const kernels::NmsParams& p,
              const Tensor& box_counts, const Tensor& image_counts, const Tensor& out,
              const Tensor& out_counts) {
  const cudaStream_t stream = current_stream(x.device()).handle();
  kernels::nms_count_cuda(x.dtype(), x.data_ptr(), s, p, box_counts.data<int32_t>(),
                          image_counts.data<int32_t>(), stream);
  const std::vector<int32_t> counts = image_counts.to(Device::cpu()).to_vector<int32_t>();
  const kernels::NmsCudaPlan plan = kernels::nms_cuda_plan(s, p, counts.data());
  Tensor ws = Tensor::empty({static_cast<int64_t>(std::max<size_t>(plan.workspace_bytes, 1))},
                            DType::U8, x.device());
  kernels::nms_suppress_cuda(x.dtype(), x.data_ptr(), s, p, plan, box_counts.data<int32_t>(),
                             image_counts.data<int32_t>(), ws.data_ptr(), out.data<float>(),
                             out_counts.data<int32_t>(), stream);
}

// Arguments: {device, batch, setting (1 = validation, 0 = detection)}.
void BM_Nms(benchmark::State& state) {
  const Device device = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1);
  const bool val = state.range(2) == 1;
  bench::Case c(state, device, DType::F32, str(batch, "x", kBoxes, "x", kNo));
  if (c.skipped()) return;
  c.add_label("setting", val ? "val" : "detect");
  const kernels::NmsShape s{batch, kBoxes, kNo};
  const kernels::NmsParams p = params(val);
  const Tensor host = predictions(batch);
  if (device.is_cpu()) {
    std::vector<float> out(batch * p.max_det * 6);
    std::vector<int32_t> counts(batch);
    c.run([&] { kernels::nms_cpu(DType::F32, host.data_ptr(), s, p, out.data(), counts.data()); });
  } else {
    const Tensor x = host.to(device);
    const Tensor box_counts = Tensor::empty({batch * kBoxes}, DType::I32, device);
    const Tensor image_counts = Tensor::empty({batch}, DType::I32, device);
    const Tensor out = Tensor::empty({batch, p.max_det, 6}, DType::F32, device);
    const Tensor out_counts = Tensor::empty({batch}, DType::I32, device);
    c.run([&] { run_cuda(x, s, p, box_counts, image_counts, out, out_counts); });
  }
  c.report_bytes(static_cast<double>(host.numel()) * sizeof(float));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t setting : {0, 1}) {
    b->Args({0, 1, setting});
    for (int64_t batch : {1, 32}) b->Args({1, batch, setting});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_Nms)->Apply(Args);
