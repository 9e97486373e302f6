// The Trainer's set-up phases, in the order run() calls them.
#include "yolo/trainer_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "dist/env.h"
#include "dist/sync_batchnorm.h"
#include "engine/atomic_file.h"
#include "engine/safetensors.h"
#include "kernels/cuda_check.h"
#include "yolo/autoanchor.h"
#include "yolo/checkpoint.h"
#include "yolo/cuda_graph_choice.h"
#include "yolo/data/sampler.h"
#include "yolo/data_argument.h"
#include "yolo/device_choice.h"
#include "yolo/freeze.h"
#include "yolo/plot_canvas.h"
#include "yolo/plots.h"
#include "yolo/rank_agreement.h"
#include "yolo/rank_collectives.h"
#include "yolo/release_weights.h"
#include "yolo/run_dir.h"
#include "yolo/text_file.h"
#include "yolo/train_echo.h"
#include "yolo/weights.h"
#include "yolo/weights_file.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;

// --- set-up ------------------------------------------------------------------------------------

void Trainer::resolve_options() {
  options_ = requested_;
  if (options_.resume) {
    resume_ = plan_resume(requested_);
    options_ = resume_->options;
  }
  dist::DistFlags flags;
  flags.timeout = std::chrono::seconds(static_cast<int64_t>(options_.dist_timeout));
  const dist::DistOptions dopt = dist::resolve_dist_options(flags, dist::process_environment());
  rank_.rank = dopt.rank;
  rank_.world = dopt.world_size;
  rank_.local = dopt.local_rank;
  KESTREL_CHECK(options_.dist_phase_timeout > 0, "--dist-phase-timeout must be positive, got ", options_.dist_phase_timeout);
  rank_.phase_limit = std::chrono::milliseconds(static_cast<int64_t>(options_.dist_phase_timeout * 1000));
  out_.emplace(rank_.main());
  // As train.py's print_args (an evolution prints its options once, not per generation).
  if (requested_.evolve == 0) out_->line(out_->colour("train: "), args_text(train_args_echo(requested_)));
  // Checked before any process group or worker exists, so a wrong batch fails at once everywhere.
  KESTREL_CHECK(options_.batch_size % rank_.world == 0, "--batch-size ", options_.batch_size,
                " must be a multiple of the world size ", rank_.world);
  KESTREL_CHECK(!options_.image_weights || rank_.world == 1, "--image-weights is not compatible with multi-process ",
                "(DDP) training, as in the reference; train in one process or drop it");
  KESTREL_CHECK(!options_.image_weights || !options_.rect, "--image-weights draws images across the rectangular ",
                "batches, whose images must share a shape; drop --rect or --image-weights");
  KESTREL_CHECK(!options_.quad || (options_.batch_size / rank_.world) % 4 == 0, "--quad makes one image of every 4: the ",
                "batch per rank (", options_.batch_size / rank_.world, ") must be a multiple of 4");
  device_ = pick_device(options_.device, rank_.local);
  // This rank's GPU is current on this thread from here on: nothing creates a context on GPU 0.
  if (device_.is_cuda()) KESTREL_CUDA_CHECK(cudaSetDevice(device_.index));
  if (rank_.world > 1) rank_.group = dist::init_process_group(device_.is_cuda() ? "nccl" : "gloo", dopt, device_);
  precision_ = pick_precision(options_.amp, device_);
  compute_ = precision_.activations;
  if (resume_)
    for (const std::string& note : resume_->notes) out_->line("--resume: ", note);
  if (options_.sync_bn && rank_.world == 1)
    out_->line("WARNING: --sync-bn is ignored in a single process; it applies to DDP training with several ranks");
}

void Trainer::prepare_run_directory() {
  if (rank_.main()) {
    const std::string named = (fs::path(options_.project) / options_.name).string();
    if (resume_) {
      save_dir_ = resume_->save_dir;
      run_lock_ = RunDirLock::acquire(save_dir_, "that run is still training; let it finish or stop it "
                                                 "(Ctrl-C) before resuming");
    } else if (options_.evolve > 0) {
      save_dir_ = named;
    } else {
      ClaimedRunDir claim = claim_run_dir(named, options_.exist_ok);
      save_dir_ = claim.path;
      created_run_dir_ = claim.created;
      run_lock_ = std::move(claim.lock);
    }
    if (run_lock_) remove_stale_temporaries(*run_lock_);
  }
  save_dir_ = broadcast_string(rank_, device_, save_dir_);
  weights_dir_ = save_dir_ + "/weights";
  last_path_ = weights_dir_ + "/last.safetensors";
  best_path_ = weights_dir_ + "/best.safetensors";
  if (rank_.main()) fs::create_directories(weights_dir_);
  hyp_ = resume_             ? resume_->info.hyp
         : options_.hyp_values     ? *options_.hyp_values
         : options_.hyp.empty()    ? Hyp{}
                             : load_hyp(options_.hyp);
  hyp_.label_smoothing = options_.label_smoothing;
  out_->line(out_->colour("hyperparameters: "), hyp_echo(hyp_));
  if (rank_.main()) {
    write_file_atomic(save_dir_ + "/hyp.yaml", hyp_.to_yaml());
    write_yaml_pairs(save_dir_ + "/opt.yaml", options_.to_pairs());
  }
  if (rank_.main() && !options_.no_tensorboard) {
    board_.emplace(save_dir_, resume_ ? std::optional<int64_t>(resume_->info.epoch + 1) : std::nullopt);
    out_->line(out_->colour("TensorBoard: "), "Start with 'tensorboard --logdir ", fs::path(save_dir_).parent_path().string(),
               "', view at http://localhost:6006/");
  }
}

void Trainer::discard_new_run_directory() {
  if (!created_run_dir_) return;
  board_.reset();  // its event file is open in the directory
  std::error_code ec;
  fs::remove_all(save_dir_, ec);
  if (ec) out_->line("WARNING: cannot remove the new run directory ", save_dir_, ": ", ec.message());
  run_lock_.reset();
}

void Trainer::load_data() {
  // Downloads and the synthetic set are rank 0's, first. Then each other node's local rank 0
  // fetches what its own disk lacks (nothing, where the nodes share the folder), before any other
  // rank reads: once per node, as the reference's torch_distributed_zero_first(LOCAL_RANK), but
  // never two nodes at once into one shared folder.
  const std::string data_yaml = rank_.main() ? resolve_data(options_.data) : std::string();
  if (rank_.main() && !resume_) fetch_missing_weights(options_.weights);
  wait_for_rank0(rank_, "writing the dataset");
  if (!rank_.main() && rank_.local == 0) {
    resolve_data(options_.data);
    if (!resume_) fetch_missing_weights(options_.weights);
  }
  wait_for_rank0(rank_, "each node's downloads");
  dataset_config_ = data::load_dataset_config(rank_.main() ? data_yaml : resolve_data(options_.data));
  num_classes_ = options_.single_cls ? 1 : dataset_config_->nc;
  names_ = options_.single_cls ? std::vector<std::string>{"item"} : dataset_config_->names;
  if (rank_.main()) train_split_ = data::load_split(*dataset_config_, "train", dataset_config_->nc, options_.single_cls, true);
  wait_for_rank0(rank_, "the train label cache");  // rank 0 builds it, the others then read it
  if (!rank_.main()) train_split_ = data::load_split(*dataset_config_, "train", dataset_config_->nc, options_.single_cls, true);
  train_index_ = dataset_fingerprint(train_split_.records);
  train_scan_lines_ = {train_split_.summary};
  train_scan_lines_.insert(train_scan_lines_.end(), train_split_.warnings.begin(), train_split_.warnings.end());
  if (train_split_.records.empty()) say_train_scan();
  KESTREL_CHECK(!train_split_.records.empty(), "no usable training images in ", dataset_config_->yaml_path,
                ": check the `train` entry and the label files");
}

void Trainer::say_train_scan() {
  for (const std::string& l : train_scan_lines_) out_->line("train: ", l);
  train_scan_lines_.clear();
}

void Trainer::build_model() {
  std::optional<SafetensorsFile> weights;
  if (!options_.weights.empty() && !resume_) weights = read_weights_file(options_.weights);
  // A resumed run rebuilds the model its checkpoint holds (its yaml travels in the options).
  const json::Value* saved_yaml = resume_ ? resume_->info.options.find("cfg_yaml") : nullptr;
  KESTREL_CHECK(saved_yaml || !options_.cfg.empty() || weights, "no model: give --cfg or --weights");
  cfg_text_ = saved_yaml ? saved_yaml->as_string() : options_.cfg.empty() ? weights_model_yaml(*weights) : read_text(options_.cfg);
  ModelConfig mcfg = parse_model_config(
      cfg_text_, !options_.cfg.empty() ? options_.cfg : saved_yaml ? resume_->path + " (its model yaml)" : options_.weights + " (its model yaml)");
  if (hyp_.anchors > 0) {  // the hyp's anchor count replaces the yaml's anchors; AutoAnchor sets them
    out_->line("Overriding model.yaml anchors with anchors=", short_number(hyp_.anchors));
    mcfg.anchors.clear();
    mcfg.anchors_per_level = static_cast<int>(std::lround(hyp_.anchors));
  }
  model_ = std::make_shared<DetectionModel>(mcfg, num_classes_, options_.seed);
  // The reference's parse_model table and summary as its Model() logs them (GFLOPs at 640).
  if (out_->on()) out_->raw(model_->describe(640));
  if (resume_) {
    // The model as the checkpoint left it (the reference builds it from ckpt['model']) before
    // anything copies from it: AutoAnchor does not run again on --resume, and ComputeLoss copies
    // the anchors it evolved from the model when built. restore() loads this state once more,
    // with the rest of the training state.
    load_weights(*model_, resume_->path, "model.");
  } else if (weights) {
    // As the reference: the anchors come along only when the model is the weights' own (no --cfg,
    // no hyp anchors), and a YOLOv5 .pt gives its 'model' (Kestrel's own files their EMA, as
    // inference uses it).
    const bool own_anchors = options_.cfg.empty() && hyp_.anchors == 0;
    const std::vector<std::string> exclude = own_anchors ? std::vector<std::string>{} : std::vector<std::string>{"anchor"};
    const std::string prefix = is_pt_weights(*weights) ? "model." : inference_prefix(*weights);
    TransferResult tr = transfer_weights(*model_, *weights, exclude, prefix);
    out_->line("Transferred ", tr.transferred, "/", tr.total, " items from ", options_.weights);
  }
  const int layers = static_cast<int>(mcfg.rows.size());
  const std::vector<std::string> prefixes = freeze_prefixes(options_.freeze, layers);
  const dist::NamedTensors parameters = model_->named_parameters();
  dist::NamedTensors frozen;
  for (const auto& [n, p] : parameters)
    if (std::any_of(prefixes.begin(), prefixes.end(), [&n = n](const std::string& f) { return n.rfind(f, 0) == 0; }))
      frozen.emplace_back(n, p);
  if (frozen.size() == parameters.size()) {  // the reference fails in backward then: refuse it up front
    std::string freeze;
    for (int f : options_.freeze) {
      if (!freeze.empty()) freeze += ',';
      freeze += std::to_string(f);
    }
    KESTREL_FAIL("--freeze ", freeze, " freezes every layer of ", options_.cfg, ", which has ", layers,
                 " (model.0 to model.", layers - 1, "): nothing would train; freeze fewer, ",
                 "e.g. --freeze 10 for the backbone");
  }
  for (const auto& [n, p] : frozen) {
    out_->line("freezing ", n);
    p.set_requires_grad(false);
  }
  max_stride_ = std::max(static_cast<int>(*std::max_element(model_->strides().begin(), model_->strides().end())), 32);
  if (options_.img_size % max_stride_ != 0) {  // the reference's check_img_size: round up, say so
    const int fixed = (options_.img_size + max_stride_ - 1) / max_stride_ * max_stride_;
    out_->line("WARNING: --img-size ", options_.img_size, " must be a multiple of the max stride ", max_stride_, ", updating to ", fixed);
    options_.img_size = fixed;
  }

  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& [n, p] : model_->named_parameters()) shapes.emplace_back(n, p.shape());
  std::vector<std::pair<std::string, std::string>> flags;
  for (const auto& kv : options_.to_pairs())
    if (kv.first != "device" && kv.first != "workers") flags.push_back(kv);
  check_ranks_agree(rank_, device_, run_fingerprint(train_split_.records, shapes, flags));

  // AutoAnchor on rank 0, before the weights are shared.
  if (rank_.main() && !options_.noautoanchor && !resume_) {
    Generator anchor_gen(options_.seed, 7);
    autoanchor_report_ = check_anchors(train_split_.records, model_->detect(), hyp_.anchor_t, options_.img_size, anchor_gen);
  }
  if (rank_.main() && plots() && !resume_) {
    plot_labels(train_split_.records, names_, save_dir_ + "/labels.jpg");
    plot_labels_correlogram(train_split_.records, save_dir_ + "/labels_correlogram.jpg");
  }
  wait_for_rank0(rank_, "AutoAnchor and label plots");
  model_->to(device_);
  layers::set_conv_operands(*model_, precision_.conv_operands);  // the EMA model validates in float32
  if (options_.sync_bn && rank_.world > 1) {
    auto group = rank_.group;
    model_->visit([&](layers::Module& m) {
      if (auto* bn = dynamic_cast<layers::BatchNorm2d*>(&m))
        bn->norm = [group](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm,
                           const Tensor& rv, bool training, double momentum, double eps,
                           const Tensor& batches_tracked) {
          return dist::sync_batch_norm(x, w, b, rm, rv, training, momentum, eps, group,
                                       batches_tracked);
        };
    });
    out_->line("Using SyncBatchNorm()");
  }
  for (auto& b : model_->named_buffers())
    if (b.second.device() == device_) device_buffers_.push_back(b);
  if (rank_.world > 1) {  // identical weights everywhere before the optimizer exists
    dist::NamedTensors all = model_->named_parameters();
    for (auto& b : device_buffers_) all.push_back(b);
    dist::broadcast_tensors(*rank_.group, all, 0);
  }
  if (rank_.main()) {
    ema_model_ = std::make_shared<DetectionModel>(mcfg, num_classes_, options_.seed);
    ema_model_->to(device_);
    ema_ = std::make_unique<ModelEma>(ema_model_, *model_);
  }
}

void Trainer::build_optimization() {
  const double wd = scaled_weight_decay(hyp_.weight_decay, options_.batch_size);
  optimizer_ = std::make_unique<Optimizer>(
      smart_optimizer(*model_, parse_optimizer_kind(options_.optimizer), hyp_.lr0, hyp_.momentum, wd));
  out_->line(out_->colour("optimizer: "), optimizer_->describe());
  say_train_scan();

  const int batch = options_.batch_size / rank_.world;
  data::PipelineOptions popt;
  popt.img_size = options_.img_size;
  popt.augment = true;
  popt.rect = options_.rect;
  popt.batch_size = batch;
  popt.stride = max_stride_;
  popt.pad = 0.0;
  popt.hyp = hyp_;
  auto pipeline = std::make_shared<data::AugmentPipeline>(train_split_.records, popt);
  if (options_.cache == "ram" && !pipeline->cache_images(std::max(1, options_.workers)))
    out_->line("WARNING: --cache ram: not enough memory, images are read from disk");
  const data::DistributedSampler sampler(pipeline->size(), rank_.rank, rank_.world, !options_.rect, options_.seed);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int local_ranks = dist::local_world_size(dist::process_environment());
  if (!pipeline->cached()) {  // images decode once while a quarter of the free memory lasts
    pipeline->keep_decoded_images(data::default_image_cache_budget(local_ranks));
    out_->line(out_->colour("train: "), data::image_cache_line(*pipeline));
  }
  workers_ = data::dataloader_workers(cores, local_ranks, batch, pipeline->size(), options_.workers);
  data::EpochOrder order = data::distributed_order(sampler);
  if (options_.image_weights) {
    image_weights_ = std::make_shared<data::ImageWeights>(train_split_.records, num_classes_, options_.seed);
    order = data::image_weighted_order(sampler, image_weights_);
  }
  data::LoaderOptions lopt;
  lopt.batch_size = batch;
  lopt.workers = workers_;
  lopt.quad = options_.quad;
  lopt.seed = options_.seed;
  lopt.rank = rank_.rank;
  lopt.cuda_device = device_.is_cuda() ? device_.index : -1;
  loader_ = std::make_unique<data::Loader>(pipeline, lopt, std::move(order));
  batches_per_epoch_ = loader_->len();
  schedule_ = std::make_unique<LrSchedule>(hyp_, options_.epochs, options_.cos_lr, options_.batch_size, batches_per_epoch_, *optimizer_);
  scaler_ = std::make_unique<GradScaler>(compute_ == DType::F16);
  stopper_ = std::make_unique<EarlyStopping>(options_.patience);
  if (rank_.world > 1) {
    dist::ReducerOptions ropt;
    ropt.bucket_cap_mb = options_.bucket_cap_mb;
    ropt.edge_bucket_cap_mb = options_.edge_bucket_mb;
    ropt.overlap = !options_.no_overlap;
    ropt.timed_buckets = options_.timed_buckets;
    const std::optional<dist::GradCompress> compress = dist::parse_grad_compress(options_.grad_compress);
    KESTREL_CHECK(compress, "--grad-compress must be none, fp16 or bf16, got '", options_.grad_compress, "'");
    ropt.compress = *compress;
    ropt.record_timeline = !options_.trace.empty();
    reducer_ = std::make_unique<dist::Reducer>(trainable(), rank_.group, ropt);
    // DDP's broadcast_buffers: the structure is compared across ranks here, once.
    if (!options_.sync_bn)
      buffer_broadcaster_ = std::make_unique<dist::TensorBroadcaster>(rank_.group, device_buffers_, 0);
  }
  const int nl = static_cast<int>(model_->detect().nl);
  compute_loss_ = std::make_unique<ComputeLoss>(model_->detect(), scale_loss_hyp(hyp_, nl, num_classes_, options_.img_size));
  if (rank_.main()) {
    data::DatasetSplit val_split = data::load_split(*dataset_config_, "val", dataset_config_->nc, options_.single_cls, true);
    out_->line("val: ", val_split.summary);
    for (const auto& w : val_split.warnings) out_->line("val: ", w);
    ValOptions vopt;
    vopt.img_size = options_.img_size;
    vopt.batch_size = batch * 2;
    vopt.single_cls = options_.single_cls;
    vopt.compute_dtype = compute_;
    // As the reference's val loader in training: twice the batch and twice the workers.
    vopt.workers = data::dataloader_workers(cores, local_ranks, int64_t{batch} * 2,
                                            static_cast<int64_t>(val_split.records.size()), options_.workers * 2);
    vopt.save_dir = save_dir_;
    vopt.training = true;
    validator_ = std::make_unique<Validator>(val_split.records, names_, num_classes_, vopt, device_, max_stride_);
    validator_->set_console(&*out_);
  }
  out_->raw(autoanchor_report_);  // the reference checks the anchors once both loaders exist
  autoanchor_report_.clear();
  wait_for_rank0(rank_, "the val label cache");
  if (!options_.trace.empty()) trace_ = std::make_unique<dist::TraceWriter>(rank_.rank);
  TrainStepParts parts;
  parts.model = model_.get();
  parts.loss = compute_loss_.get();
  parts.optimizer = optimizer_.get();
  parts.scaler = scaler_.get();
  parts.ema = ema_.get();
  parts.reducer = reducer_.get();
  parts.buffers = buffer_broadcaster_.get();
  TrainStepOptions sopt;
  sopt.graphs = cuda_graphs_wanted(options_, device_, rank_) ? GraphMode::On : GraphMode::Off;
  sopt.capture_failure_fatal = options_.cuda_graph == "on";  // auto: a failed capture falls back
  sopt.loss_factor = options_.quad ? 4.0 : 1.0;  // --quad's batches hold a quarter of the images
  step_ = std::make_unique<TrainStep>(parts, rank_, device_, sopt);
  BatchPrepOptions bopt;
  bopt.multi_scale = options_.multi_scale;
  bopt.seed = options_.seed;
  bopt.rank = rank_.rank;
  bopt.img_size = options_.img_size;
  bopt.stride = max_stride_;
  if (sopt.graphs == GraphMode::On && rank_.world > 1)
    bopt.target_rows = run_target_rows(train_split_.records, batch, hyp_, options_.rect);
  batch_prep_ = std::make_unique<BatchPrep>(*compute_loss_, device_, compute_, bopt);
}

dist::NamedTensors Trainer::trainable() const {
  dist::NamedTensors out;
  for (auto& [n, p] : model_->named_parameters())
    if (p.requires_grad()) out.emplace_back(n, p);
  return out;
}

// After the Reducer exists, so that pending gradients land in its buffers.
void Trainer::restore() {
  if (!resume_) {
    schedule_->set_last_epoch(-1);
    return;
  }
  TrainingObjects objs{model_.get(), ema_.get(), optimizer_.get(), schedule_.get(), scaler_.get()};
  const CheckpointInfo info = load_checkpoint(resume_->path, objs, trainable());
  start_epoch_ = static_cast<int>(info.epoch) + 1;
  last_completed_ = static_cast<int>(info.epoch);
  best_fitness_ = info.best_fitness;
  const RunProgress run = RunProgress::from_json(info.progress, resume_->path);
  resumed_progress_ = run.epoch;
  nan_steps_ = run.nan_steps;
  stopper_->load_state(run.stopper);
  accumulated_ = run.accumulated;
  step_->set_window_nonfinite(run.window_nonfinite);
  if (image_weights_) image_weights_->set_maps(run.class_maps);
  // Every rank reads the checkpoint; rank 0's layout is the one adopted (broadcast).
  if (reducer_ && run.bucket_layout && !reducer_->adopt_layout(*run.bucket_layout))
    out_->line("--resume: the checkpoint's gradient buckets were laid out under other bucket options; laying them out anew");
  KESTREL_CHECK(start_epoch_ < options_.epochs, resume_->path, " finished all ", options_.epochs,
                " epochs already; nothing to resume");
  const std::string dataset_note =
      check_resume_dataset(run.dataset, train_index_, resumed_progress_.next_batch, batches_per_epoch_, resume_->path);
  if (!dataset_note.empty()) out_->line("--resume: ", dataset_note);
  if (rank_.main()) {
    const int dropped = ResultsCsv(save_dir_ + "/results.csv").keep_through(static_cast<int>(info.epoch));
    if (dropped) out_->line("--resume: dropped ", dropped, " results.csv row(s) past the checkpoint's epoch ", info.epoch);
  }
  out_->line("Resuming training from ", resume_->path, " from epoch ", start_epoch_,
             resumed_progress_.next_batch ? str(" batch ", resumed_progress_.next_batch) : std::string(), " to ",
             options_.epochs, " total epochs");
  schedule_->set_last_epoch(start_epoch_ - 1);
}

void Trainer::announce() {
  out_->line("Image sizes ", options_.img_size, " train, ", options_.img_size, " val");
  out_->line("Using ", workers_, " dataloader workers per rank, ", rank_.world, " rank", rank_.world > 1 ? "s" : "",
             ", ", precision_.describe(), " compute on ", device_.str());
  out_->line("Logging results to ", save_dir_);
  out_->line("Starting training for ", options_.epochs, " epochs...");
}

}  // namespace kestrel::yolo
