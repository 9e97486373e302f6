#include "bench/yolo/train/step_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "bench/kernels/bench_common.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/ops/layout.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "engine/stream.h"
#include "layers/conv.h"
#include "yolo/data/augment_pipeline.h"
#include "yolo/data/batch_uploader.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/loader.h"
#include "yolo/data/sampler.h"
#include "yolo/data/synthetic.h"
#include "yolo/model/model.h"
#include "yolo/train/batch_prep.h"
#include "yolo/train/device_choice.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/loss.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/train_step.h"

namespace kestrel::bench {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string model_path(const std::string& model) {
  if (std::filesystem::exists(model)) return model;
  const std::string under = "models/" + model + (model.ends_with(".yaml") ? "" : ".yaml");
  KESTREL_CHECK(std::filesystem::exists(under), "train_step --model: neither '", model, "' nor '", under,
                "' exists; give a model yaml or a name such as yolov5s (run from the repository root)");
  return under;
}

namespace {

// Random u8 images and 4 random boxes per image, made once and kept on the device: the step then
// measures compute only.
struct ResidentBatch {
  Tensor images, targets;
};

ResidentBatch random_batch(int batch, int img_size, int nc, Device device, uint64_t seed) {
  Generator gen(seed, 3);
  std::vector<uint8_t> pixels(static_cast<size_t>(batch) * img_size * img_size * 3);
  for (auto& p : pixels) p = static_cast<uint8_t>(gen.next_u32() & 0xFF);
  constexpr int kBoxes = 4;
  std::vector<float> t;
  for (int i = 0; i < batch; ++i)
    for (int k = 0; k < kBoxes; ++k) {
      const double w = gen.uniform(0.05, 0.4), h = gen.uniform(0.05, 0.4);
      t.insert(t.end(), {static_cast<float>(i), static_cast<float>(gen.randint(static_cast<uint64_t>(nc))),
                         static_cast<float>(gen.uniform(w / 2, 1 - w / 2)),
                         static_cast<float>(gen.uniform(h / 2, 1 - h / 2)), static_cast<float>(w),
                         static_cast<float>(h)});
    }
  return {Tensor::from_vector(pixels, {batch, img_size, img_size, 3}, device),
          Tensor::from_vector(t, {static_cast<int64_t>(batch) * kBoxes, 6}, device)};
}

// The real training input path: augmenting pipeline, worker threads, host-to-device upload.
class DataFeed {
 public:
  DataFeed(const StepConfig& c, int stride) {
    const std::string yaml = yolo::data::resolve_data_argument(c.data, yolo::data::default_synthetic_dir());
    const yolo::data::DatasetConfig dcfg = yolo::data::load_dataset_config(yaml);
    nc_ = dcfg.nc;
    yolo::data::DatasetSplit split = yolo::data::load_split(dcfg, "train", dcfg.nc, false, true);
    KESTREL_CHECK(!split.records.empty(), "train_step --data ", yaml, ": no usable training images");
    yolo::data::PipelineOptions p;
    p.img_size = c.img_size;
    p.augment = true;
    p.batch_size = c.batch;
    p.stride = stride;
    auto pipeline = std::make_shared<yolo::data::AugmentPipeline>(split.records, p);
    yolo::data::DistributedSampler sampler(pipeline->size(), 0, 1, true, c.seed);
    yolo::data::EpochOrder order{sampler.num_samples(), [sampler](int64_t epoch) mutable {
                                   sampler.set_epoch(epoch);
                                   return sampler.indices();
                                 },
                                 {}};
    yolo::data::LoaderOptions lopt;
    lopt.batch_size = c.batch;
    lopt.workers = c.workers;
    lopt.seed = c.seed;
    loader_ = std::make_unique<yolo::data::Loader>(pipeline, lopt, order);
    uploader_ = std::make_unique<yolo::data::BatchUploader>(c.device);
    device_ = c.device;
    loader_->start_epoch(epoch_);
  }
  int nc() const { return nc_; }

  // The next batch on the device; epochs roll over as training would. Adds the time spent
  // blocked waiting for the loader to waited_s.
  yolo::data::DeviceBatch next(double& waited_s) {
    const auto t0 = Clock::now();
    std::optional<yolo::data::Batch> b = loader_->next();
    if (!b) {
      loader_->start_epoch(++epoch_);
      b = loader_->next();
    }
    waited_s += std::chrono::duration<double>(Clock::now() - t0).count();
    KESTREL_CHECK(b.has_value(), "train_step --data: the loader produced no batch");
    // As the trainer: on a GPU the targets are padded to a few fixed row counts.
    if (device_.is_cuda()) b->targets = yolo::pad_batch_targets(b->targets, 0, b->index);
    return uploader_->to_device(*b);
  }

 private:
  int nc_ = 0;
  Device device_ = Device::cpu();
  int64_t epoch_ = 0;
  std::unique_ptr<yolo::data::Loader> loader_;
  std::unique_ptr<yolo::data::BatchUploader> uploader_;
};

}  // namespace

double max_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports kilobytes
}

StepResult run_step_bench(const StepConfig& c) {
  if (c.task == "classify") return run_classify_step_bench(c);
  if (c.task == "segment") return run_segment_step_bench(c);
  KESTREL_CHECK(c.task == "detect", "train_step --task: detect, classify or segment, got '", c.task, "'");
  KESTREL_CHECK(c.iters > 0 && c.warmup >= 0 && c.batch > 0 && c.img_size > 0,
                "train_step: --iters, --batch-size and --img-size must be > 0 and --warmup >= 0");
  // bf16-operands: the CPU's former --amp bf16 (float32 activations, bfloat16 convolution operands),
  // which classification's training still runs, for comparison with bfloat16 activations.
  const bool operands = c.amp == "bf16-operands";
  const yolo::Precision precision =
      yolo::pick_precision(yolo::parse_amp_mode(operands ? "bf16" : c.amp), c.device,
                           operands ? yolo::CpuMixed::Operands : yolo::CpuMixed::Activations);
  const DType compute = precision.activations;
  const yolo::ModelConfig mcfg = yolo::load_model_config(model_path(c.model));

  // The pipeline's stride only shapes rect batches, which training with mosaic does not use.
  std::unique_ptr<DataFeed> feed;
  if (!c.data.empty()) feed = std::make_unique<DataFeed>(c, 32);
  yolo::DetectionModel model(mcfg, feed ? std::optional<int>(feed->nc()) : std::nullopt, c.seed);
  const double max_stride = *std::max_element(model.strides().begin(), model.strides().end());
  KESTREL_CHECK(c.img_size % static_cast<int>(max_stride) == 0, "train_step --img-size ", c.img_size,
                " must be a multiple of the model's max stride ", max_stride);
  StepResult r;
  r.gflops_per_image = model.gflops(c.img_size);
  model.to(c.device);
  layers::set_conv_operands(model, precision.conv_operands);
  layers::set_conv_math(model, c.tf32, false);
  model.train(true);

  const yolo::Hyp hyp;
  yolo::Optimizer optimizer = yolo::smart_optimizer(model, yolo::OptimizerKind::SGD, hyp.lr0, hyp.momentum,
                                                    yolo::scaled_weight_decay(hyp.weight_decay, c.batch));
  yolo::GradScaler scaler(compute == DType::F16);
  const int nc = static_cast<int>(model.detect().nc);
  const yolo::ComputeLoss compute_loss(model.detect(),
                                       yolo::scale_loss_hyp(hyp, static_cast<int>(model.detect().nl), nc, c.img_size));
  ResidentBatch resident;
  if (!feed) resident = random_batch(c.batch, c.img_size, nc, c.device, c.seed);
  yolo::TrainStepParts parts;
  parts.model = &model;
  parts.loss = &compute_loss;
  parts.optimizer = &optimizer;
  parts.scaler = &scaler;
  KESTREL_CHECK(!c.cuda_graph || c.device.is_cuda(), "train_step --cuda-graph on needs a CUDA device");
  KESTREL_CHECK(!c.cuda_graph || !c.forward_only, "train_step --cuda-graph on measures training steps; leave out --forward-only");
  yolo::TrainStepOptions sopt;
  sopt.graphs = c.cuda_graph ? yolo::GraphMode::On : yolo::GraphMode::Off;
  sopt.graph_warmup_steps = 1;
  KESTREL_CHECK(!c.cuda_graph || c.warmup >= 3, "train_step --cuda-graph on needs --warmup 3 or more (eager steps, then the capture)");
  yolo::TrainStep train_step(parts, yolo::RankInfo{}, c.device, sopt);
  int64_t batch_index = 0;

  double waited_s = 0;
  KESTREL_CHECK(!c.forward_only || !feed, "train_step --forward-only runs on resident batches; leave out --data");
  if (c.forward_only) {  // as detect and val: eval, BN folded into the convolutions once
    model.train(false);
    layers::fuse_convs(model);
  }
  auto step = [&] {
    if (c.forward_only) {
      autograd::NoGradGuard no_grad;
      Tensor x = ops::images_to_input(resident.images, compute);
      r.last_loss = model.forward(x)[0].numel();
      return;
    }
    yolo::data::DeviceBatch db = feed ? feed->next(waited_s) : yolo::data::DeviceBatch{resident.images, resident.targets};
    Tensor x = ops::images_to_input(db.images, compute);
    // The trainer's step: nothing read back but the previous batch's status.
    train_step.run(x, db.targets, batch_index++, true, false);
    for (const yolo::BatchStatus& s : train_step.take_previous()) r.last_loss = s.box + s.obj + s.cls;
  };

  for (int i = 0; i < c.warmup; ++i) step();
  const int64_t replays_before = train_step.graph_stats().replays;
  waited_s = 0;
  profiler::reset();
  profiler::enable(c.profile);
  double seconds = 0;
  if (c.device.is_cuda()) {
    // Device time between two events on the compute stream; the host may run ahead inside.
    allocator_reset_peak(c.device);
    const Stream stream = current_stream(c.device);
    stream.synchronize();
    Event start(c.device, true), stop(c.device, true);
    const auto wall0 = Clock::now();
    start.record(stream);
    for (int i = 0; i < c.iters; ++i) step();
    stop.record(stream);
    stop.synchronize();
    // With a loader the host wall clock is the honest end-to-end figure (waits included).
    seconds = feed ? std::chrono::duration<double>(Clock::now() - wall0).count() : start.elapsed_ms(stop) / 1e3;
    r.peak_mem_mb = static_cast<double>(allocator_stats(c.device).peak_allocated) / (1024.0 * 1024.0);
  } else {
    const auto t0 = Clock::now();
    for (int i = 0; i < c.iters; ++i) step();
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.peak_mem_mb = max_rss_mb();
  }
  if (!c.forward_only)
    for (const yolo::BatchStatus& s : train_step.drain()) r.last_loss = s.box + s.obj + s.cls;
  if (c.cuda_graph) r.graph_replays = train_step.graph_stats().replays - replays_before;
  profiler::enable(false);
  if (c.profile) std::fprintf(stderr, "%s, batch %d, %d steps:\n%s", c.model.c_str(), c.batch, c.iters,
                              profiler::table(c.iters).c_str());
  r.ms_per_step = 1e3 * seconds / c.iters;
  r.images_per_s = c.batch * c.iters / seconds;
  const DevicePeak peak = device_peak(c.device);
  // Half-precision math (CUDA's bf16/fp16 activations, or the CPU's bf16 convolution operands
  // under float32 activations) against the half-precision limit; float32 against FMA's.
  const bool half_math = compute != DType::F32 || precision.conv_operands != ops::ConvOperands::Float32;
  const double peak_flops = half_math ? peak.tensor_flop_per_s : peak.fp32_flop_per_s;
  r.mfu = peak_flops > 0 ? (c.forward_only ? 1.0 : 3.0) * r.gflops_per_image * 1e9 * r.images_per_s / peak_flops : 0.0;
  r.peak_gflops = peak_flops / 1e9;
  if (feed) r.data_wait_pct = 100.0 * waited_s / seconds;
  return r;
}

namespace {
std::string head(const StepConfig& c) {
  char buf[512];
  std::snprintf(buf, sizeof buf, R"({"bench":"train_step","task":"%s","mode":"%s","model":"%s","img_size":%d,"batch":%d,"amp":"%s","device":"%s","iters":%d,"warmup":%d,"data":"%s","cuda_graph":"%s","tf32":"%s")",
                c.task.c_str(), c.forward_only ? "inference" : "train", c.model.c_str(), c.img_size, c.batch, c.amp.c_str(), c.device.str().c_str(), c.iters, c.warmup,
                c.data.empty() ? "resident" : c.data.c_str(), c.cuda_graph ? "on" : "off", c.tf32 ? "on" : "off");
  return buf;
}
}  // namespace

std::string result_json(const StepConfig& c, const StepResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                R"(,"images_per_s":%.3f,"ms_per_step":%.3f,"mfu":%.5f,"peak_gflops":%.1f,"gflops_per_image":%.4f,"peak_mem_mb":%.1f,"peak_mem_kind":"%s","loss":%.5g)",
                r.images_per_s, r.ms_per_step, r.mfu, r.peak_gflops, r.gflops_per_image, r.peak_mem_mb,
                c.device.is_cuda() ? "allocator_peak" : "process_max_rss", r.last_loss);
  std::string s = head(c) + buf;
  if (r.graph_replays >= 0) {
    std::snprintf(buf, sizeof buf, R"(,"graph_replays":%lld)", static_cast<long long>(r.graph_replays));
    s += buf;
  }
  if (r.data_wait_pct >= 0) {
    std::snprintf(buf, sizeof buf, R"(,"data_wait_pct":%.2f,"workers":%d)", r.data_wait_pct, c.workers);
    s += buf;
  }
  return s + "}";
}

std::string error_json(const StepConfig& c, const std::string& error) {
  std::string escaped;
  for (char ch : error) {
    if (ch == '"' || ch == '\\') escaped += '\\';
    escaped += ch == '\n' ? ' ' : ch;
  }
  return head(c) + R"(,"error":")" + escaped + "\"}";
}

}  // namespace kestrel::bench
