// train_step --task classify: classify/train.py's step on resident random batches (see step_bench.h).
#include <chrono>
#include <cmath>

#include "bench/kernels/bench_common.h"
#include "bench/yolo/train/step_bench.h"
#include "engine/autograd.h"
#include "engine/ops/cross_entropy.h"
#include "engine/random.h"
#include "engine/stream.h"
#include "layers/conv.h"
#include "yolo/model/classification_model.h"
#include "yolo/train/ema.h"
#include "yolo/train/optimizer.h"

namespace kestrel::bench {

StepResult run_classify_step_bench(const StepConfig& c) {
  KESTREL_CHECK(c.iters > 0 && c.warmup >= 0 && c.batch > 0 && c.img_size >= 32,
                "train_step: --iters, --batch-size > 0, --img-size >= 32 and --warmup >= 0");
  KESTREL_CHECK(c.amp == "off", "train_step --task classify measures float32 (--amp off)");
  KESTREL_CHECK(c.data.empty() && !c.cuda_graph, "train_step --task classify runs eager steps on resident batches");
  const int nc = 1000;
  const yolo::ModelConfig cfg = yolo::classifier_config(yolo::load_model_config(model_path(c.model)), nc);
  auto model = std::make_shared<yolo::ClassificationModel>(cfg, c.seed);
  StepResult r;
  r.gflops_per_image = model->summary_gflops(c.img_size, false);
  model->to(c.device);
  layers::set_conv_math(*model, c.tf32, false);
  model->train(!c.forward_only);

  // ImageNet-normalised random images, roughly N(0, 1), and random labels.
  Generator gen(c.seed, 7);
  const Tensor images = Tensor::empty({c.batch, c.img_size, c.img_size, 3}, DType::F32, c.device);
  gen.fill_normal(images, 0.0, 1.0);
  std::vector<int64_t> label_values(static_cast<size_t>(c.batch));
  for (auto& l : label_values) l = static_cast<int64_t>(gen.randint(nc));
  const Tensor labels = Tensor::from_vector(label_values, {c.batch}, c.device);

  yolo::Optimizer optimizer = yolo::smart_optimizer(*model, yolo::OptimizerKind::Adam, 0.001, 0.9, 5e-5);
  const std::vector<Tensor> params = optimizer.parameters();
  auto ema_model = std::make_shared<yolo::ClassificationModel>(cfg, c.seed);
  ema_model->to(c.device);
  yolo::ModelEma ema(ema_model, *model);
  if (c.forward_only) layers::fuse_convs(*model);

  Tensor loss;
  auto step = [&] {
    if (c.forward_only) {
      autograd::NoGradGuard no_grad;
      loss = model->forward(images);
      return;
    }
    loss = ops::cross_entropy(model->forward(images), labels, 0.1);
    loss.backward();
    yolo::clip_grad_norm(params, 10.0);
    optimizer.step();
    optimizer.zero_grad();
    ema.update(*model);
  };
  for (int i = 0; i < c.warmup; ++i) step();
  current_stream(c.device).synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < c.iters; ++i) step();
  current_stream(c.device).synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.last_loss = c.forward_only ? 0.0 : loss.item();
  r.peak_mem_mb = max_rss_mb();
  r.ms_per_step = 1e3 * seconds / c.iters;
  r.images_per_s = c.batch * c.iters / seconds;
  const DevicePeak peak = device_peak(c.device);
  r.mfu = peak.fp32_flop_per_s > 0
              ? (c.forward_only ? 1.0 : 3.0) * r.gflops_per_image * 1e9 * r.images_per_s / peak.fp32_flop_per_s
              : 0.0;
  r.peak_gflops = peak.fp32_flop_per_s / 1e9;
  return r;
}

}  // namespace kestrel::bench
