// train_step --task segment: segment/train.py's step on one resident random batch (see step_bench.h).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "bench/kernels/bench_common.h"
#include "bench/yolo/train/step_bench.h"
#include "engine/ops/layout.h"
#include "engine/random.h"
#include "engine/stream.h"
#include "layers/conv.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/train/device_choice.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/loss.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/seg_loss.h"
#include "yolo/train/seg_objective.h"
#include "yolo/train/train_step.h"

namespace kestrel::bench {
namespace {

// Random u8 images, 4 random boxes per image (as detection's bench) and the overlap masks the
// loader makes at img/4: per image, its targets in decreasing area (the order
// polygons2masks_overlap sorts them into), each box's pixels holding its 1-based index in the
// image, later (smaller) boxes painted over earlier ones. float32, as the loader hands them over.
struct SegBatch {
  Tensor images, targets, masks;
};

SegBatch random_seg_batch(int batch, int img_size, int nc, Device device, uint64_t seed) {
  Generator gen(seed, 3);
  std::vector<uint8_t> pixels(static_cast<size_t>(batch) * img_size * img_size * 3);
  for (auto& p : pixels) p = static_cast<uint8_t>(gen.next_u32() & 0xFF);
  constexpr int kBoxes = 4;
  const int m = img_size / 4;
  std::vector<float> t;
  std::vector<float> masks(static_cast<size_t>(batch) * m * m, 0.0f);
  for (int i = 0; i < batch; ++i) {
    std::vector<std::array<float, 6>> rows;
    for (int k = 0; k < kBoxes; ++k) {
      const double w = gen.uniform(0.05, 0.4), h = gen.uniform(0.05, 0.4);
      rows.push_back({static_cast<float>(i), static_cast<float>(gen.randint(static_cast<uint64_t>(nc))),
                      static_cast<float>(gen.uniform(w / 2, 1 - w / 2)),
                      static_cast<float>(gen.uniform(h / 2, 1 - h / 2)), static_cast<float>(w),
                      static_cast<float>(h)});
    }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a[4] * a[5] > b[4] * b[5]; });
    float* plane = masks.data() + static_cast<size_t>(i) * m * m;
    for (int k = 0; k < kBoxes; ++k) {
      const auto& r = rows[static_cast<size_t>(k)];
      t.insert(t.end(), r.begin(), r.end());
      const auto edge = [m](double v) { return std::clamp(static_cast<int>(std::lround(v * m)), 0, m); };
      const int x0 = edge(r[2] - r[4] / 2), x1 = edge(r[2] + r[4] / 2);
      const int y0 = edge(r[3] - r[5] / 2), y1 = edge(r[3] + r[5] / 2);
      for (int y = y0; y < y1; ++y)
        for (int x = x0; x < x1; ++x) plane[static_cast<size_t>(y) * m + x] = static_cast<float>(k + 1);
    }
  }
  return {Tensor::from_vector(pixels, {batch, img_size, img_size, 3}, device),
          Tensor::from_vector(t, {static_cast<int64_t>(batch) * kBoxes, 6}, device),
          Tensor::from_vector(masks, {batch, m, m}, device)};
}

}  // namespace

StepResult run_segment_step_bench(const StepConfig& c) {
  KESTREL_CHECK(c.iters > 0 && c.warmup >= 0 && c.batch > 0 && c.img_size > 0,
                "train_step: --iters, --batch-size and --img-size must be > 0 and --warmup >= 0");
  KESTREL_CHECK(c.data.empty(), "train_step --task segment runs on resident random batches; leave out --data");
  KESTREL_CHECK(!c.forward_only, "train_step --task segment measures training steps; leave out --forward-only");
  KESTREL_CHECK(!c.cuda_graph, "train_step --task segment runs eager steps (the mask loss reads the targets on the "
                               "host, which a CUDA graph cannot hold)");
  const yolo::Precision precision = yolo::pick_precision(yolo::parse_amp_mode(c.amp), c.device);
  const DType compute = precision.activations;
  const yolo::ModelConfig mcfg = yolo::load_model_config(model_path(c.model));
  KESTREL_CHECK(yolo::is_segmentation_config(mcfg), "train_step --task segment needs a -seg model (yolov5s-seg), got ",
                c.model);
  const int nc = 80;
  yolo::SegmentationModel model(mcfg, nc, c.seed);
  const double max_stride = *std::max_element(model.strides().begin(), model.strides().end());
  KESTREL_CHECK(c.img_size % static_cast<int>(max_stride) == 0, "train_step --img-size ", c.img_size,
                " must be a multiple of the model's max stride ", max_stride);
  StepResult r;
  r.gflops_per_image = model.summary_gflops(c.img_size, false);
  model.to(c.device);
  layers::set_conv_operands(model, precision.conv_operands);
  layers::set_conv_math(model, c.tf32, false);
  model.train(true);

  // segment/train.py: hyp.scratch-low scaled to the levels, classes and image size; SGD over
  // smart_optimizer's groups with the batch-scaled decay; ComputeLoss(model, overlap=True).
  const yolo::Hyp hyp;
  yolo::Optimizer optimizer = yolo::smart_optimizer(model, yolo::OptimizerKind::SGD, hyp.lr0, hyp.momentum,
                                                    yolo::scaled_weight_decay(hyp.weight_decay, c.batch));
  yolo::GradScaler scaler(compute == DType::F16);
  const layers::Segment& head = model.segment();
  const yolo::ComputeSegLoss loss(head, yolo::scale_loss_hyp(hyp, static_cast<int>(head.nl), nc, c.img_size),
                                  /*overlap=*/true);
  const yolo::SegmentationObjective objective(model, loss);
  const SegBatch batch = random_seg_batch(c.batch, c.img_size, nc, c.device, c.seed);
  yolo::TrainStepParts parts;
  parts.objective = &objective;
  parts.optimizer = &optimizer;
  parts.scaler = &scaler;
  yolo::TrainStep train_step(parts, yolo::RankInfo{}, c.device);
  int64_t batch_index = 0;
  auto step = [&] {
    const Tensor x = ops::images_to_input(batch.images, compute);
    train_step.run(x, batch.targets, batch_index++, true, false, batch.masks);
    for (const yolo::BatchStatus& s : train_step.take_previous()) r.last_loss = s.box + s.seg + s.obj + s.cls;
  };

  for (int i = 0; i < c.warmup; ++i) step();
  current_stream(c.device).synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < c.iters; ++i) step();
  current_stream(c.device).synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const yolo::BatchStatus& s : train_step.drain()) r.last_loss = s.box + s.seg + s.obj + s.cls;
  r.peak_mem_mb = max_rss_mb();
  r.ms_per_step = 1e3 * seconds / c.iters;
  r.images_per_s = c.batch * c.iters / seconds;
  const DevicePeak peak = device_peak(c.device);
  const double peak_flops = compute == DType::F32 ? peak.fp32_flop_per_s : peak.tensor_flop_per_s;
  r.mfu = peak_flops > 0 ? 3.0 * r.gflops_per_image * 1e9 * r.images_per_s / peak_flops : 0.0;
  r.peak_gflops = peak_flops / 1e9;
  return r;
}

}  // namespace kestrel::bench
