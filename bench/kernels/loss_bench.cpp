// The YOLOv5 loss, forward and backward, at YOLOv5s training shapes: 640x640 images, nc = 80,
// three levels (80, 40, 20 cells), 20 targets per image. The kernels are called directly (this
// binary links the engine, not the yolo library), with the buffers ComputeLoss would allocate.
// The floor is memory traffic: every prediction is read (objectness of every cell, matched rows)
// and every gradient element written once; bytes reported are those two tensors.
#include <vector>

#include "bench/kernels/bench_common.h"
#include "engine/random.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "kernels/yolo_loss.h"

using namespace kestrel;

namespace {

constexpr int64_t kNc = 80, kNa = 3, kTargetsPerImage = 20;

struct LevelTensors {
  Tensor pred, grad, slot_cell, slot_cls, slot_tbox, slot_iou, slot_dbox, sorted_cell, sorted_slot, tobj;
};

template <class Acc>
kernels::LossLevelBuffers<Acc> buffers(const LevelTensors& t) {
  kernels::LossLevelBuffers<Acc> b;
  b.pred = t.pred.data_ptr();
  b.slot_cell = static_cast<int32_t*>(t.slot_cell.data_ptr());
  b.slot_cls = static_cast<int32_t*>(t.slot_cls.data_ptr());
  b.slot_tbox = static_cast<float*>(t.slot_tbox.data_ptr());
  b.slot_iou = static_cast<Acc*>(t.slot_iou.data_ptr());
  b.slot_dbox = static_cast<Acc*>(t.slot_dbox.data_ptr());
  b.sorted_cell = static_cast<int32_t*>(t.sorted_cell.data_ptr());
  b.sorted_slot = static_cast<int32_t*>(t.sorted_slot.data_ptr());
  b.tobj = static_cast<Acc*>(t.tobj.data_ptr());
  return b;
}

void BM_YoloLoss(benchmark::State& state) {
  const Device device = bench::device_from_arg(state.range(0));
  const int64_t batch = state.range(1), img = state.range(2);
  const DType dtype = bench::dtype_from_arg(state.range(3));
  // The shape names the first level's predictions (bs, na, ny, nx, no).
  bench::Case c(state, device, dtype, str(batch, "x", kNa, "x", img / 8, "x", img / 8, "x", kNc + 5));
  if (c.skipped()) return;
  const bool cpu = device.is_cpu();
  const DType acc = cpu ? DType::F64 : DType::F32;

  kernels::LossConfig cfg;
  cfg.bs = batch;
  cfg.na = kNa;
  cfg.nc = kNc;
  cfg.nt = batch * kTargetsPerImage;
  const int64_t S = cfg.slots();
  const double anchors_px[3][6] = {{10, 13, 16, 30, 33, 23}, {30, 61, 62, 45, 59, 119},
                                   {116, 90, 156, 198, 373, 326}};
  Generator gen(7);
  std::vector<kernels::LossLevel> levels;
  std::vector<LevelTensors> tensors;
  double bytes = 0;
  for (int l = 0; l < 3; ++l) {
    const int64_t stride = 8 << l, g = img / stride;
    kernels::LossLevel lv;
    lv.ny = lv.nx = g;
    for (int k = 0; k < 6; ++k) lv.anchors[k] = static_cast<float>(anchors_px[l][k] / stride);
    lv.balance = l == 0 ? 4.0 : (l == 1 ? 1.0 : 0.4);
    levels.push_back(lv);
    LevelTensors t;
    Tensor p = Tensor::empty({batch, kNa, g, g, kNc + 5}, DType::F32, device);
    gen.fill_uniform(p, -4, 4);
    t.pred = p.to(dtype);
    t.grad = Tensor::empty_like(t.pred);
    t.slot_cell = Tensor::empty({S}, DType::I32, device);
    t.slot_cls = Tensor::empty({S}, DType::I32, device);
    t.slot_tbox = Tensor::empty({S, 4}, DType::F32, device);
    t.slot_iou = Tensor::empty({S}, acc, device);
    t.slot_dbox = Tensor::empty({S, 4}, acc, device);
    t.sorted_cell = Tensor::empty({S}, DType::I32, device);
    t.sorted_slot = Tensor::empty({S}, DType::I32, device);
    t.tobj = Tensor::empty({lv.cells(cfg)}, acc, device);
    tensors.push_back(t);
    bytes += 2.0 * t.pred.numel() * t.pred.element_size();
  }
  std::vector<float> rows;
  for (int64_t i = 0; i < cfg.nt; ++i) {
    const float w = static_cast<float>(gen.uniform(0.02, 0.4)), h = static_cast<float>(gen.uniform(0.02, 0.4));
    rows.insert(rows.end(), {static_cast<float>(i % batch), static_cast<float>(i % kNc),
                             static_cast<float>(gen.uniform()), static_cast<float>(gen.uniform()), w, h});
  }
  Tensor targets = Tensor::from_vector(rows, {cfg.nt, 6}, device);
  Tensor summary = Tensor::empty({kernels::kSummarySize}, DType::F64, device);
  Tensor total = Tensor::empty({}, cpu && dtype == DType::F64 ? DType::F64 : DType::F32, device);
  std::vector<void*> grads;
  for (const LevelTensors& t : tensors) grads.push_back(t.grad.data_ptr());

  if (cpu) {
    std::vector<kernels::LossLevelBuffers<double>> b;
    for (const LevelTensors& t : tensors) b.push_back(buffers<double>(t));
    c.run([&] {
      kernels::yolo_loss_forward_cpu(dtype, cfg, levels.data(), b.data(), 3, targets.data<float>(),
                                     summary.data<double>(), total.data_ptr());
      kernels::yolo_loss_backward_cpu(dtype, cfg, levels.data(), b.data(), 3, summary.data<double>(),
                                      1.0, grads.data());
    });
  } else {
    std::vector<kernels::LossLevelBuffers<float>> b;
    for (const LevelTensors& t : tensors) b.push_back(buffers<float>(t));
    Tensor ws = Tensor::empty(
        {static_cast<int64_t>(kernels::yolo_loss_cuda_workspace_bytes(cfg, levels.data(), 3))},
        DType::U8, device);
    Tensor one = Tensor::ones({}, DType::F32, device);
    const cudaStream_t stream = current_stream(device).handle();
    c.run([&] {
      kernels::yolo_loss_forward_cuda(dtype, cfg, levels.data(), b.data(), 3, targets.data<float>(),
                                      summary.data<double>(), total.data<float>(), ws.data_ptr(), stream);
      kernels::yolo_loss_backward_cuda(dtype, cfg, levels.data(), b.data(), 3, summary.data<double>(),
                                       one.data<float>(), grads.data(), stream);
    });
  }
  c.report_bytes(bytes);
}

// {device, batch, image size, dtype}: CUDA at batch 16 and 64 in float32 and bfloat16; the CPU at
// batch 1 on 320x320 in float32.
void Args(benchmark::internal::Benchmark* b) {
  b->Args({0, 1, 320, 0});
  for (int64_t batch : {16, 64})
    for (int64_t dtype : {0, 1}) b->Args({1, batch, 640, dtype});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_YoloLoss)->Apply(Args);
