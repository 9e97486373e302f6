#include "yolo/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dist/ddp.h"
#include "dist/env.h"
#include "dist/reducer.h"
#include "dist/sync_batchnorm.h"
#include "dist/timeline.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/layout.h"
#include "engine/safetensors.h"
#include "kernels/cuda_check.h"
#include "yolo/autoanchor.h"
#include "yolo/checkpoint.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/loader.h"
#include "yolo/data/sampler.h"
#include "yolo/ema.h"
#include "yolo/grad_scaler.h"
#include "yolo/loss.h"
#include "yolo/optimizer.h"
#include "yolo/plot_canvas.h"
#include "yolo/plots.h"
#include "yolo/run_dir.h"
#include "yolo/schedule.h"
#include "yolo/train_support.h"
#include "yolo/validator.h"
#include "yolo/weights.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

// Set by SIGINT/SIGTERM: the loop saves last and stops at the next batch. A signal handler can
// only reach process-wide state, hence the one global.
std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested = true; }

using Clock = std::chrono::steady_clock;

// Prints on rank 0 only.
class Console {
 public:
  explicit Console(bool on) : on_(on) {}
  template <class... A>
  void line(const A&... parts) const {
    if (!on_) return;
    std::printf("%s\n", str(parts...).c_str());
    std::fflush(stdout);
  }
  void raw(const std::string& s) const {
    if (!on_) return;
    std::printf("%s", s.c_str());
    std::fflush(stdout);
  }
  bool on() const { return on_; }

 private:
  bool on_;
};


}  // namespace


int train(const TrainOptions& requested) {
  TrainOptions o = requested;
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);

  // --- ranks and device --------------------------------------------------------------------
  RankInfo rank;
  dist::DistFlags flags;
  flags.timeout = std::chrono::seconds(static_cast<int64_t>(o.dist_timeout));
  const dist::DistOptions dopt = dist::resolve_dist_options(flags, dist::process_environment());
  rank.rank = dopt.rank;
  rank.world = dopt.world_size;
  rank.local = dopt.local_rank;
  const Device device = pick_device(o.device, rank.local);
  // This rank's GPU is current on this thread from here on: nothing creates a context on GPU 0.
  if (device.is_cuda()) KESTREL_CUDA_CHECK(cudaSetDevice(device.index));
  if (rank.world > 1) rank.group = dist::init_process_group(device.is_cuda() ? "nccl" : "gloo", dopt, device);
  Console out(rank.main());
  KESTREL_CHECK(o.batch_size % rank.world == 0, "--batch-size ", o.batch_size,
                " must be a multiple of the world size ", rank.world);
  const int batch = o.batch_size / rank.world;
  const DType compute = pick_compute_dtype(o.amp, device);

  // --- resume --------------------------------------------------------------------------------
  std::string resume_path;
  CheckpointInfo resume_info;
  if (o.resume) {
    resume_path = o.resume->empty() ? "" : *o.resume;
    if (resume_path.empty()) {  // the newest last.safetensors under the project
      fs::file_time_type newest{};
      if (fs::exists(o.project))
        for (const auto& e : fs::recursive_directory_iterator(o.project))
          if (e.path().filename() == "last.safetensors" && e.last_write_time() > newest) {
            newest = e.last_write_time();
            resume_path = e.path().string();
          }
      KESTREL_CHECK(!resume_path.empty(), "--resume: no last.safetensors under '", o.project,
                    "'; give the checkpoint's path");
    }
    resume_info = read_checkpoint_info(resume_path);
    const json::Value& opts = resume_info.options;
    auto text = [&](const char* k) { return opts.find(k) ? opts.find(k)->as_string() : std::string(); };
    o.cfg = text("cfg");
    o.data = text("data");
    o.epochs = std::stoi(text("epochs"));
    o.batch_size = std::stoi(text("batch_size"));
    o.img_size = std::stoi(text("imgsz"));
    o.optimizer = text("optimizer");
    o.cos_lr = text("cos_lr") == "true";
    // Everything else that shapes the run continues as it was (the reference reloads opt.yaml).
    auto flag = [&](const char* k) { return text(k) == "true"; };
    o.rect = flag("rect");
    o.single_cls = flag("single_cls");
    o.multi_scale = flag("multi_scale");
    o.sync_bn = flag("sync_bn");
    o.noval = flag("noval");
    o.nosave = flag("nosave");
    o.noplots = flag("noplots");
    o.amp = text("amp");
    o.seed = std::stoull(text("seed"));
    o.patience = std::stoi(text("patience"));
    o.save_period = std::stoi(text("save_period"));
    o.label_smoothing = std::stod(text("label_smoothing"));
    o.weights.clear();
  }

  // --- run directory ---------------------------------------------------------------------------
  std::string save_dir;
  if (rank.main())
    save_dir = o.resume ? fs::path(resume_path).parent_path().parent_path().string()
                        : increment_path((fs::path(o.project) / o.name).string(), o.exist_ok);
  save_dir = broadcast_string(rank, device, save_dir);
  const std::string weights_dir = save_dir + "/weights";
  if (rank.main()) fs::create_directories(weights_dir);

  Hyp hyp = o.resume ? resume_info.hyp : (o.hyp.empty() ? Hyp{} : load_hyp(o.hyp));
  hyp.label_smoothing = o.label_smoothing;
  if (rank.main()) {
    std::ofstream(save_dir + "/hyp.yaml") << hyp.to_yaml();
    write_yaml_pairs(save_dir + "/opt.yaml", o.to_pairs());
  }
  std::string hyp_line = "hyperparameters: ";
  for (const auto& [k, v] : hyp.values()) hyp_line += k + "=" + short_number(v) + ", ";
  out.line(hyp_line.substr(0, hyp_line.size() - 2));

  // --- data ----------------------------------------------------------------------------------
  const std::string data_yaml = rank.main() ? resolve_data(o.data) : std::string();
  barrier(rank);  // the synthetic dataset is written by rank 0 first
  const data::DatasetConfig dcfg = data::load_dataset_config(rank.main() ? data_yaml : resolve_data(o.data));
  const int nc = o.single_cls ? 1 : dcfg.nc;
  std::vector<std::string> names = o.single_cls ? std::vector<std::string>{"item"} : dcfg.names;
  data::DatasetSplit train_split;
  if (rank.main()) train_split = data::load_split(dcfg, "train", dcfg.nc, o.single_cls, true);
  barrier(rank);  // rank 0 builds the label cache, the others then read it
  if (!rank.main()) train_split = data::load_split(dcfg, "train", dcfg.nc, o.single_cls, true);
  out.line("train: ", train_split.summary);
  for (const auto& w : train_split.warnings) out.line("train: WARNING ", w);
  KESTREL_CHECK(!train_split.records.empty(), "no usable training images in ", dcfg.yaml_path,
                ": check the `train` entry and the label files");

  // --- model -----------------------------------------------------------------------------------
  const std::string cfg_text = read_text(o.cfg);
  ModelConfig mcfg = parse_model_config(cfg_text, o.cfg);
  auto model = std::make_shared<DetectionModel>(mcfg, nc, o.seed);
  if (!o.weights.empty()) {
    const std::string prefix = load_safetensors(o.weights).contains("ema.model.0.conv.weight") ? "ema." : "";
    TransferResult tr = transfer_weights(*model, o.weights, {"anchor"}, prefix);
    out.line("Transferred ", tr.transferred, "/", tr.total, " items from ", o.weights);
  }
  for (const auto& prefix : freeze_prefixes(o.freeze))
    for (auto& [n, p] : model->named_parameters())
      if (n.rfind(prefix, 0) == 0) {
        out.line("freezing ", n);
        p.set_requires_grad(false);
      }
  const int gs = std::max(static_cast<int>(*std::max_element(model->strides().begin(), model->strides().end())), 32);
  KESTREL_CHECK(o.img_size % gs == 0, "--img-size ", o.img_size, " must be a multiple of the max stride ", gs);

  // AutoAnchor on rank 0, before the weights are shared.
  if (rank.main() && !o.noautoanchor && !o.resume) {
    Generator anchor_gen(o.seed, 7);
    out.raw(check_anchors(train_split.records, model->detect(), hyp.anchor_t, o.img_size, anchor_gen));
  }
  if (rank.main() && !o.noplots && !o.resume) plot_labels(train_split.records, names, save_dir + "/labels.jpg");
  model->to(device);
  if (o.sync_bn && rank.world > 1) {
    auto group = rank.group;
    model->visit([&](layers::Module& m) {
      if (auto* bn = dynamic_cast<layers::BatchNorm2d*>(&m))
        bn->norm = [group](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm,
                           const Tensor& rv, bool training, double momentum, double eps) {
          return dist::sync_batch_norm(x, w, b, rm, rv, training, momentum, eps, group);
        };
    });
    out.line("Using SyncBatchNorm()");
  }
  if (rank.world > 1) {  // identical weights everywhere before the optimizer exists
    dist::NamedTensors all = model->named_parameters();
    for (auto& b : model->named_buffers())
      if (b.second.device() == device) all.push_back(b);
    dist::broadcast_tensors(*rank.group, all, 0);
  }

  // --- optimizer, schedule, EMA, scaler ----------------------------------------------------------
  const double wd = scaled_weight_decay(hyp.weight_decay, o.batch_size);
  Optimizer optimizer = smart_optimizer(*model, parse_optimizer_kind(o.optimizer), hyp.lr0, hyp.momentum, wd);
  out.line("optimizer: ", optimizer.describe());

  const data::PipelineOptions popt = [&] {
    data::PipelineOptions p;
    p.img_size = o.img_size;
    p.augment = true;
    p.rect = o.rect;
    p.batch_size = batch;
    p.stride = gs;
    p.pad = 0.0;
    p.hyp = hyp;
    return p;
  }();
  auto pipeline = std::make_shared<data::AugmentPipeline>(train_split.records, popt);
  if (o.cache == "ram" && !pipeline->cache_images(std::max(1, o.workers)))
    out.line("WARNING: --cache ram: not enough memory, images are read from disk");
  data::DistributedSampler sampler(pipeline->size(), rank.rank, rank.world, !o.rect, o.seed);
  data::EpochOrder order{sampler.num_samples(), [sampler](int64_t epoch) mutable {
                           sampler.set_epoch(epoch);
                           return sampler.indices();
                         }};
  data::LoaderOptions lopt;
  lopt.batch_size = batch;
  lopt.workers = o.workers;
  lopt.seed = o.seed;
  lopt.rank = rank.rank;
  lopt.cuda_device = device.is_cuda() ? device.index : -1;
  data::Loader loader(pipeline, lopt, order);
  const int64_t nb = loader.len();
  LrSchedule schedule(hyp, o.epochs, o.cos_lr, o.batch_size, nb, optimizer);
  GradScaler scaler(compute == DType::F16);

  std::unique_ptr<ModelEma> ema;
  std::shared_ptr<DetectionModel> ema_model;
  if (rank.main()) {
    ema_model = std::make_shared<DetectionModel>(mcfg, nc, o.seed);
    ema_model->to(device);
    ema = std::make_unique<ModelEma>(ema_model, *model);
  }

  int start_epoch = 0;
  double best_fitness = 0;
  if (o.resume) {
    TrainingObjects objs{model.get(), ema.get(), &optimizer, &schedule, &scaler};
    CheckpointInfo info = load_checkpoint(resume_path, objs);
    start_epoch = static_cast<int>(info.epoch) + 1;
    best_fitness = info.best_fitness;
    KESTREL_CHECK(start_epoch < o.epochs, resume_path, " finished all ", o.epochs,
                  " epochs already; nothing to resume");
    out.line("Resuming training from ", resume_path, " from epoch ", start_epoch, " to ", o.epochs, " total epochs");
  }
  schedule.set_last_epoch(start_epoch - 1);

  std::unique_ptr<dist::Reducer> reducer;
  if (rank.world > 1) {
    dist::NamedTensors trainable;
    for (auto& [n, p] : model->named_parameters())
      if (p.requires_grad()) trainable.emplace_back(n, p);
    dist::ReducerOptions ropt;
    ropt.bucket_cap_mb = o.bucket_cap_mb;
    ropt.overlap = !o.no_overlap;
    reducer = std::make_unique<dist::Reducer>(trainable, rank.group, ropt);
  }

  // Loss with the reference's hyperparameter scaling.
  const int nl = static_cast<int>(model->detect().nl);
  ComputeLoss compute_loss(model->detect(), scale_loss_hyp(hyp, nl, nc, o.img_size));

  std::unique_ptr<Validator> validator;
  if (rank.main()) {
    data::DatasetSplit val_split = data::load_split(dcfg, "val", dcfg.nc, o.single_cls, true);
    out.line("val: ", val_split.summary);
    ValOptions vopt;
    vopt.img_size = o.img_size;
    vopt.batch_size = batch * 2;
    vopt.single_cls = o.single_cls;
    vopt.compute_dtype = compute;
    vopt.workers = std::max(1, o.workers);
    vopt.save_dir = save_dir;
    validator = std::make_unique<Validator>(val_split.records, names, nc, vopt, device, gs);
  }

  out.line(model->summary(o.img_size));
  out.line("Image sizes ", o.img_size, " train, ", o.img_size, " val");
  out.line("Using ", o.workers, " dataloader workers per rank, ", rank.world, " rank", rank.world > 1 ? "s" : "",
           ", ", dtype_name(compute), " compute on ", device.str());
  out.line("Logging results to ", save_dir);
  out.line("Starting training for ", o.epochs, " epochs...");

  const ResultsCsv csv(save_dir + "/results.csv");
  int patience_left = o.patience;
  int best_epoch = start_epoch > 0 ? start_epoch - 1 : 0;
  const auto t_start = Clock::now();
  int64_t nan_steps = 0;
  ValResult last_val;
  bool stopped = false;
  Generator scale_gen(o.seed + 1 + rank.rank, 11);
  const bool tty = isatty(STDOUT_FILENO);
  data::BatchUploader uploader(device);
  dist::NamedTensors device_buffers;
  for (auto& b : model->named_buffers())
    if (b.second.device() == device) device_buffers.push_back(b);
  std::unique_ptr<dist::TraceWriter> trace;
  if (!o.trace.empty()) trace = std::make_unique<dist::TraceWriter>(rank.rank);

  for (int epoch = start_epoch; epoch < o.epochs && !stopped; ++epoch) {
    model->train(true);
    loader.start_epoch(epoch);
    double mloss[3] = {0, 0, 0};
    double overlap_sum = 0;
    int64_t overlap_steps = 0;
    int64_t seen_batches = 0, epoch_nan = 0;
    out.line(str("\n", std::string(6, ' '), "Epoch    GPU_mem   box_loss   obj_loss   cls_loss  Instances       Size"));
    const auto t_epoch = Clock::now();
    int64_t i = 0;
    while (std::optional<data::Batch> b = loader.next()) {
      if (o.max_batches > 0 && i >= o.max_batches) break;
      if (g_stop_requested) break;
      const int64_t ni = i + nb * epoch;
      schedule.warmup(ni, epoch);
      if (o.multi_scale) {
        const int64_t lo = o.img_size / 2, hi = o.img_size * 3 / 2 + gs;
        const int64_t sz = (lo + static_cast<int64_t>(scale_gen.uniform() * (hi - lo))) / gs * gs;
        b->images = resize_batch(b->images, sz);
      }
      data::DeviceBatch db = uploader.to_device(*b);
      Tensor x = ops::images_to_input(db.images, compute);

      const bool step_now = schedule.step_due(ni);
      if (reducer && !o.sync_bn) dist::broadcast_tensors(*rank.group, device_buffers, 0);  // DDP broadcast_buffers
      std::vector<Tensor> preds = model->forward(x);
      LossResult loss = compute_loss(preds, db.targets);
      Tensor total = rank.world > 1 ? ops::mul(loss.total, static_cast<double>(rank.world)) : loss.total;
      // A non-finite loss on any rank skips the step on every rank (a rank alone skipping its
      // backward would leave the others waiting in their all-reduces).
      bool finite = std::isfinite(loss.box + loss.obj + loss.cls);
      if (rank.world > 1) {
        Tensor bad = Tensor::full({1}, finite ? 0.0 : 1.0, DType::F32, device);
        rank.group->all_reduce(bad, dist::ReduceOp::Sum)->synchronize();
        finite = bad.item() == 0;
      }
      if (!finite) {
        ++nan_steps;
        ++epoch_nan;
        if (reducer) reducer->zero_grad(); else optimizer.zero_grad();
        ++i;
        continue;
      }
      if (reducer) {
        reducer->set_sync(step_now);
        reducer->prepare_for_backward();
      }
      scaler.scale(total).backward();
      if (reducer) {
        reducer->finalize();
        if (step_now) {
          const dist::StepTimeline& t = reducer->last_timeline();
          overlap_sum += dist::overlap_efficiency(t);
          ++overlap_steps;
          if (trace) trace->add(t);
        }
      }

      if (step_now) {
        scaler.unscale(optimizer);
        clip_grad_norm(optimizer.parameters(), 10.0);
        scaler.step(optimizer);
        scaler.update();
        if (reducer) reducer->zero_grad(); else optimizer.zero_grad();
        if (ema) ema->update(*model);
        schedule.record_step(ni);
        if (o.check_sync && rank.world > 1)
          dist::check_sync(*rank.group, model->named_parameters(), str("parameters after step ", ni));
      }
      const double items[3] = {loss.box, loss.obj, loss.cls};
      for (int k = 0; k < 3; ++k) mloss[k] = (mloss[k] * seen_batches + items[k]) / (seen_batches + 1);
      ++seen_batches;
      if (rank.main() && epoch == start_epoch && i < 3 && !o.noplots)
        plot_batch(b->images, target_boxes(b->targets, b->images.size(1), b->images.size(2)), names,
                   save_dir + "/train_batch" + std::to_string(i) + ".jpg");
      const int64_t shown = o.max_batches > 0 ? std::min<int64_t>(nb, o.max_batches) : nb;
      if (out.on() && (tty || i + 1 == shown || (i + 1) % 50 == 0)) {
        const double secs = std::chrono::duration<double>(Clock::now() - t_epoch).count();
        const double mem = device.is_cuda() ? allocator_stats(device).reserved / 1e9 : 0.0;
        char line[256];
        std::snprintf(line, sizeof line, "%11s %9.3gG %10.4g %10.4g %10.4g %10lld %10lld: %3d%% %lld/%lld [%s, %.2fit/s]",
                      str(epoch, "/", o.epochs - 1).c_str(), mem, mloss[0], mloss[1], mloss[2],
                      static_cast<long long>(b->targets.size(0)), static_cast<long long>(x.size(1)),
                      static_cast<int>(100 * (i + 1) / shown), static_cast<long long>(i + 1),
                      static_cast<long long>(shown), format_seconds(secs).c_str(), (i + 1) / std::max(secs, 1e-9));
        out.raw(std::string(tty ? "\r" : "") + line + (tty && i + 1 < shown ? "" : "\n"));
      }
      ++i;
    }
    if (g_stop_requested || epoch == o.stop_after) stopped = true;
    KESTREL_CHECK(seen_batches > 0 || epoch_nan == 0, "every training step of epoch ", epoch,
                  " produced a NaN/Inf loss; lower lr0 (--hyp), use --amp off or check the labels");
    if (epoch_nan) out.line("WARNING: ", epoch_nan, " steps with a NaN/Inf loss were skipped this epoch");

    if (rank.world > 1) {
      // Every rank must hold the same model and optimizer state: compare checksums, abort loudly.
      dist::NamedTensors state = model->named_parameters();
      for (auto& t : optimizer.state_tensors())
        if (t.second.device() == device) state.push_back(t);
      dist::check_sync(*rank.group, state, str("parameters and optimizer state after epoch ", epoch));
      if (overlap_steps)
        out.line(str("DDP: ", rank.world, " ranks, overlap efficiency ",
                     short_number(100.0 * overlap_sum / overlap_steps), "% of all-reduce time hidden behind backward"));
      if (trace) {
        const std::string path = rank.world > 1 ? str(o.trace, ".rank", rank.rank) : o.trace;
        trace->write(path);
      }
    }
    std::vector<double> lrs;
    for (const auto& g : optimizer.groups()) lrs.push_back(g.lr);
    schedule.epoch_end();

    bool stop_early = false;
    if (rank.main()) {
      const bool final_epoch = epoch + 1 == o.epochs;
      if (validator && (!o.noval || final_epoch || stopped)) {
        last_val = validator->run(*ema_model, &compute_loss);
        out.raw(last_val.table);
      }
      const ValMetrics& m = last_val.metrics;
      const double fi = fitness(m);
      if (fi > best_fitness || epoch == start_epoch) {
        if (fi > best_fitness) best_epoch = epoch;
        best_fitness = std::max(best_fitness, fi);
        patience_left = o.patience;
      } else {
        --patience_left;
      }
      csv.append(epoch, {mloss[0], mloss[1], mloss[2], m.mp, m.mr, m.map50, m.map, last_val.box_loss,
                         last_val.obj_loss, last_val.cls_loss, lrs[0], lrs.size() > 1 ? lrs[1] : 0,
                         lrs.size() > 2 ? lrs[2] : 0});
      if (!o.nosave || final_epoch || stopped) {
        CheckpointInfo info;
        info.epoch = epoch;
        info.best_fitness = best_fitness;
        info.hyp = hyp;
        info.options = options_json(o, cfg_text, nc, names);
        TrainingObjects objs{model.get(), ema.get(), &optimizer, &schedule, &scaler};
        save_checkpoint(weights_dir + "/last.safetensors", objs, info);
        if (best_epoch == epoch) fs::copy_file(weights_dir + "/last.safetensors", weights_dir + "/best.safetensors",
                                               fs::copy_options::overwrite_existing);
        if (o.save_period > 0 && epoch % o.save_period == 0)
          fs::copy_file(weights_dir + "/last.safetensors", weights_dir + "/epoch" + std::to_string(epoch) + ".safetensors",
                        fs::copy_options::overwrite_existing);
      }
      if (!o.noplots) plot_results(save_dir + "/results.csv", save_dir + "/results.png");
      stop_early = patience_left <= 0 && !final_epoch;
      if (stop_early)
        out.line("Stopping training early as no improvement observed in last ", o.patience,
                 " epochs. Best results observed at epoch ", best_epoch, ", best model saved as best.safetensors.");
    }
    if (broadcast_flag(rank, device, stop_early || stopped)) stopped = true;
  }

  const double hours = std::chrono::duration<double>(Clock::now() - t_start).count() / 3600.0;
  // As the reference: the best weights validated once more, with plots.
  if (rank.main() && !stopped && fs::exists(weights_dir + "/best.safetensors")) {
    out.line("\nValidating ", weights_dir, "/best.safetensors...");
    load_inference_weights(*ema_model, weights_dir + "/best.safetensors");
    validator->set_plots(!o.noplots);
    validator->set_verbose(true);
    out.raw(validator->run(*ema_model, &compute_loss).table);
  }
  if (nan_steps) out.line(nan_steps, " steps with a NaN/Inf loss were skipped in total");
  out.line(str("\n", o.epochs - start_epoch, " epochs completed in ", short_number(hours), " hours."));
  if (g_stop_requested) out.line("Interrupted: last.safetensors holds the last completed epoch");
  out.line("Results saved to ", save_dir);
  barrier(rank);
  return 0;
}

}  // namespace kestrel::yolo
