#include "yolo/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "dist/ddp.h"
#include "dist/env.h"
#include "dist/reducer.h"
#include "dist/sync_batchnorm.h"
#include "dist/timeline.h"
#include "engine/allocator.h"
#include "engine/atomic_file.h"
#include "engine/autograd.h"
#include "engine/safetensors.h"
#include "kernels/cuda_check.h"
#include "yolo/autoanchor.h"
#include "yolo/batch_prep.h"
#include "yolo/checkpoint.h"
#include "yolo/cuda_graph_choice.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/image_weights.h"
#include "yolo/data/loader.h"
#include "yolo/data/sampler.h"
#include "yolo/data_argument.h"
#include "yolo/dataset_fingerprint.h"
#include "yolo/device_choice.h"
#include "yolo/early_stopping.h"
#include "yolo/ema.h"
#include "yolo/freeze.h"
#include "yolo/grad_scaler.h"
#include "yolo/loss.h"
#include "yolo/optimizer.h"
#include "yolo/plot_canvas.h"
#include "yolo/plots.h"
#include "yolo/rank_agreement.h"
#include "yolo/rank_collectives.h"
#include "yolo/release_weights.h"
#include "yolo/run_dir.h"
#include "yolo/run_dir_lock.h"
#include "yolo/schedule.h"
#include "yolo/stop_signal.h"
#include "yolo/text_file.h"
#include "yolo/train_echo.h"
#include "yolo/train_progress.h"
#include "yolo/train_resume.h"
#include "yolo/train_step.h"
#include "yolo/training_board.h"
#include "yolo/validator.h"
#include "yolo/weights.h"
#include "yolo/weights_file.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// One training run, as the reference's train.py reads: the options resolved once (from the
// checkpoint when resuming), set-up in named phases, then epochs of batches, each epoch ending
// with validate -> record -> save, and a finish that validates the best weights. The run's state
// lives here, so resume, signals and early stopping each have one home:
//   resume:   resolve_options() and restore(); EpochProgress carries an interrupted epoch
//   signals:  StopSignal, agreed between ranks through the batches' statuses (a batch late),
//             acted on in train_epoch()
//   stopping: end_epoch() with the reference's EarlyStopping
class Trainer {
 public:
  Trainer(const TrainOptions& requested, TrainResults* results)
      : requested_(requested), results_(results) {}

  int run() {
    resolve_options();
    try {
      prepare_run_directory();
      load_data();
      build_model();
      build_optimization();
      restore();
    } catch (...) {
      discard_new_run_directory();
      throw;
    }
    announce();
    bool interrupted = false;
    for (int epoch = start_epoch_; epoch < options_.epochs; ++epoch) {
      if (!train_epoch(epoch)) {
        interrupted = true;
        save_interrupted(epoch);
        break;
      }
      last_completed_ = epoch;
      if (end_epoch(epoch)) {
        // A signal during the epoch's end: make sure a resumable checkpoint exists (--nosave
        // writes none before the final epoch).
        if (stop_agreed_ && options_.nosave && rank_.main()) save_checkpoint_as(last_path_, epoch, EpochProgress{});
        break;
      }
    }
    return finish(interrupted || stop_agreed_);
  }

 private:
  void resolve_options();
  void prepare_run_directory();
  // A run that fails at start-up leaves no run directory of its own behind (an existing one,
  // given with --exist-ok or --resume, stays as it was found).
  void discard_new_run_directory();
  void load_data();
  void build_model();
  void build_optimization();
  void restore();
  void announce();
  bool train_epoch(int epoch);  // false: interrupted inside the epoch
  void train_batch(const data::Batch& batch, int epoch, int64_t i);
  void account(const std::vector<BatchStatus>& statuses);
  bool end_epoch(int epoch);  // true: training stops here
  void average_pending_gradients();
  void save_checkpoint_as(const std::string& path, int64_t last_epoch, const EpochProgress& progress);
  void save_interrupted(int epoch);
  void strip_final_checkpoints();
  int finish(bool interrupted);
  dist::NamedTensors trainable() const;

  // The reference draws no plots while evolving.
  bool plots() const { return !options_.noplots && options_.evolve == 0; }

  const TrainOptions requested_;
  TrainResults* results_;
  TrainOptions options_;  // what the run uses (train.py's opt): requested_, or the checkpoint's on --resume
  StopSignal stop_;
  RankInfo rank_;
  Device device_ = Device::cpu();
  DType compute_ = DType::F32;
  std::optional<ResumePlan> resume_;
  std::optional<Console> out_;
  std::string save_dir_, weights_dir_, last_path_, best_path_;
  // Rank 0's hold on save_dir_ for the run's life (none for an --evolve generation: evolve()
  // holds it across the generations).
  std::optional<RunDirLock> run_lock_;
  bool created_run_dir_ = false;  // by this run, not found (so start-up failures remove it)
  Hyp hyp_;
  std::optional<data::DatasetConfig> dataset_config_;
  int num_classes_ = 0;  // 1 with --single-cls (train.py's nc)
  std::vector<std::string> names_;
  data::DatasetSplit train_split_;
  DatasetFingerprint train_index_;  // of train_split_'s records, for checkpoints and --resume
  std::string cfg_text_;
  std::shared_ptr<DetectionModel> model_, ema_model_;
  int max_stride_ = 32;  // the model's largest stride, at least 32 (train.py's gs)
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<data::Loader> loader_;
  int workers_ = 0;  // the loader's threads (data::dataloader_workers)
  std::shared_ptr<data::ImageWeights> image_weights_;  // --image-weights
  int64_t batches_per_epoch_ = 0;  // this rank's (train.py's nb)
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<dist::Reducer> reducer_;
  std::unique_ptr<ComputeLoss> compute_loss_;
  std::unique_ptr<Validator> validator_;
  std::unique_ptr<EarlyStopping> stopper_;
  std::unique_ptr<BatchPrep> batch_prep_;
  std::unique_ptr<dist::TraceWriter> trace_;
  std::optional<TrainingBoard> board_;  // rank 0, unless --no-tensorboard
  dist::NamedTensors device_buffers_;
  std::unique_ptr<dist::TensorBroadcaster> buffer_broadcaster_;
  std::unique_ptr<TrainStep> step_;

  // Where the run stands.
  int start_epoch_ = 0, last_completed_ = -1;
  EpochProgress progress_, resumed_progress_;
  double best_fitness_ = 0;
  int64_t nan_steps_ = 0;
  ValResult last_val_;
  int64_t batches_run_ = 0;   // by this process
  bool accumulated_ = false;  // gradients added since the last optimizer step
  bool stop_agreed_ = false;  // every rank knows a stop was requested
  double overlap_sum_ = 0;
  int64_t overlap_steps_ = 0;
  bool graphs_warned_ = false;  // the fall-back to eager steps was reported
  Clock::time_point t_start_ = Clock::now(), t_epoch_;
};

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
  compute_ = pick_compute_dtype(options_.amp, device_);
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
  const std::string data_yaml = rank_.main() ? resolve_data(options_.data) : std::string();
  if (rank_.main() && !resume_) fetch_missing_weights(options_.weights);  // one download, before the others read
  wait_for_rank0(rank_, "writing the dataset");  // the synthetic set and downloads are rank 0's, first
  dataset_config_ = data::load_dataset_config(rank_.main() ? data_yaml : resolve_data(options_.data));
  num_classes_ = options_.single_cls ? 1 : dataset_config_->nc;
  names_ = options_.single_cls ? std::vector<std::string>{"item"} : dataset_config_->names;
  if (rank_.main()) train_split_ = data::load_split(*dataset_config_, "train", dataset_config_->nc, options_.single_cls, true);
  wait_for_rank0(rank_, "the train label cache");  // rank 0 builds it, the others then read it
  if (!rank_.main()) train_split_ = data::load_split(*dataset_config_, "train", dataset_config_->nc, options_.single_cls, true);
  out_->line("train: ", train_split_.summary);
  train_index_ = dataset_fingerprint(train_split_.records);
  for (const auto& w : train_split_.warnings) out_->line("train: ", w);
  KESTREL_CHECK(!train_split_.records.empty(), "no usable training images in ", dataset_config_->yaml_path,
                ": check the `train` entry and the label files");
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
    out_->raw(check_anchors(train_split_.records, model_->detect(), hyp_.anchor_t, options_.img_size, anchor_gen));
  }
  if (rank_.main() && plots() && !resume_) {
    plot_labels(train_split_.records, names_, save_dir_ + "/labels.jpg");
    plot_labels_correlogram(train_split_.records, save_dir_ + "/labels_correlogram.jpg");
  }
  wait_for_rank0(rank_, "AutoAnchor and label plots");
  model_->to(device_);
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
    ropt.overlap = !options_.no_overlap;
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
             ", ", dtype_name(compute_), " compute on ", device_.str());
  out_->line("Logging results to ", save_dir_);
  out_->line("Starting training for ", options_.epochs, " epochs...");
}

// --- an epoch ------------------------------------------------------------------------------------

bool Trainer::train_epoch(int epoch) {
  model_->train(true);
  progress_ = epoch == start_epoch_ ? resumed_progress_ : EpochProgress{};
  loader_->start_epoch(epoch, progress_.next_batch);
  out_->line(str("\n", std::string(6, ' '), "Epoch    GPU_mem   box_loss   obj_loss   cls_loss  Instances       Size"));
  t_epoch_ = Clock::now();
  const int64_t shown = options_.max_batches > 0 ? std::min<int64_t>(batches_per_epoch_, options_.max_batches) : batches_per_epoch_;
  ProgressCadence cadence = out_->cadence();
  int64_t instances = 0, size = 0;  // the newest batch's, for the bar
  const auto show = [&](bool last) {
    const double secs = std::chrono::duration<double>(Clock::now() - t_epoch_).count();
    const double mem = device_.is_cuda() ? allocator_stats(device_).reserved / 1e9 : 0.0;
    if (last || cadence.due(progress_.next_batch, shown, secs))
      out_->progress(progress_line(epoch, options_.epochs, mem, progress_, instances, size, progress_.next_batch, shown, secs),
                     last);
  };
  for (int64_t i = progress_.next_batch; i < shown; ++i) {
    std::optional<data::Batch> b = loader_->next();
    if (!b) break;
    train_batch(*b, epoch, i);
    progress_.next_batch = i + 1;
    instances = b->targets.size(0);
    size = b->images.size(1);
    // The mean losses are learnt a batch late: the epoch's last line waits for the drain below,
    // so that it shows the epoch's mean as results.csv records it.
    if (out_->on() && i + 1 < shown) show(false);
    // Stop at an optimizer-step boundary: nothing is half-accumulated in the saved state.
    if (stop_agreed_ && !accumulated_) {
      account(step_->drain());
      return false;
    }
  }
  account(step_->drain());  // the last batches' losses and flags, before the epoch is judged
  if (out_->on() && progress_.next_batch == shown && size > 0) show(true);  // size: a batch ran
  KESTREL_CHECK(progress_.seen > 0 || progress_.skipped == 0, "every training step of epoch ", epoch,
                " produced a NaN/Inf loss; lower lr0 (--hyp), use --amp off or check the labels");
  if (progress_.skipped) out_->line("WARNING: ", progress_.skipped, " steps with a NaN/Inf loss were skipped this epoch");
  return true;
}

void Trainer::train_batch(const data::Batch& batch, int epoch, int64_t i) {
  const int64_t ni = i + batches_per_epoch_ * epoch;
  if (++batches_run_ == options_.interrupt_after) stop_.raise_as(SIGINT);
  schedule_->warmup(ni, epoch);
  const StepInputs in = batch_prep_->prepare(batch, epoch, i, ni);
  const bool step_now = schedule_->step_due(ni);
  // The batch's flags (a non-finite loss, a stop request) are summed over the ranks on the
  // device and read here one batch later, so every rank learns them at the same batch: a
  // non-finite loss anywhere skips its window's optimizer step everywhere (on the device), and a
  // stop request anywhere stops every rank at the same optimizer-step boundary.
  step_->run(in.input, in.targets, ni, step_now, stop_.received() != 0);
  if (step_->graphs_on() && !graphs_warned_ && !step_->graphs_disabled_reason().empty()) {
    out_->line("WARNING: CUDA graphs are off for the rest of this run (--cuda-graph auto): ", step_->graphs_disabled_reason());
    graphs_warned_ = true;
  }
  accumulated_ = !step_now;
  account(step_->take_previous());
  if (step_now) {
    schedule_->record_step(ni);
    if (reducer_ && trace_) {  // --trace: waits for the step's collectives to time them
      const dist::StepTimeline& t = reducer_->last_timeline();
      overlap_sum_ += dist::overlap_efficiency(t);
      ++overlap_steps_;
      trace_->add(t);
    }
    if (options_.check_sync && rank_.world > 1) {
      dist::check_sync(*rank_.group, model_->named_parameters(), str("parameters after step ", ni));
      if (buffer_broadcaster_) buffer_broadcaster_->check_structure();
    }
  }
  if (rank_.main() && ni < 3 && plots()) {
    const std::string mosaic = save_dir_ + "/train_batch" + std::to_string(ni) + ".jpg";
    plot_batch(batch.images, batch.paths, target_boxes(batch.targets, batch.images.size(1), batch.images.size(2)), names_, mosaic);
    if (board_) board_->log_image(mosaic, epoch);
  }
}

void Trainer::account(const std::vector<BatchStatus>& statuses) {
  for (const BatchStatus& s : statuses) {
    stop_agreed_ = stop_agreed_ || s.stop_ranks > 0;
    if (s.nonfinite_ranks > 0) {
      ++nan_steps_;
      ++progress_.skipped;
    } else {
      progress_.add(s.box, s.obj, s.cls);
    }
  }
}

// Gradient accumulation may span the end of an epoch. Under DDP each rank holds its own share;
// averaging them (what the next synchronised step would do anyway, as the all-reduce is linear)
// puts the job's accumulation on every rank, so that rank 0's checkpoint holds all of it. Done at
// every epoch end, not only when saving, so resumed and uninterrupted runs compute alike.
void Trainer::average_pending_gradients() {
  if (rank_.world == 1 || !accumulated_) return;
  for (auto& [n, p] : trainable())
    if (p.grad().defined()) rank_.group->all_reduce(p.grad(), dist::ReduceOp::Average)->synchronize();
}

bool Trainer::end_epoch(int epoch) {
  if (rank_.world > 1) {
    // Every rank must hold the same model and optimizer state: compare checksums, abort loudly.
    dist::NamedTensors state = model_->named_parameters();
    for (auto& t : optimizer_->state_tensors())
      if (t.second.device() == device_) state.push_back(t);
    dist::check_sync(*rank_.group, state, str("parameters and optimizer state after epoch ", epoch));
    if (overlap_steps_)
      out_->line(str("DDP: ", rank_.world, " ranks, overlap efficiency ",
                     short_number(100.0 * overlap_sum_ / overlap_steps_), "% of all-reduce time hidden behind backward"));
    if (trace_) trace_->write(str(options_.trace, ".rank", rank_.rank));
    average_pending_gradients();
  }
  std::vector<double> lrs;
  for (const auto& g : optimizer_->groups()) lrs.push_back(g.lr);
  lrs.resize(3, 0.0);
  schedule_->epoch_end();

  bool stop_early = false;
  if (rank_.main()) {
    const bool final_epoch = epoch + 1 == options_.epochs || stopper_->possible_stop();
    if (!options_.noval || final_epoch) {
      last_val_ = validator_->run(*ema_model_, compute_loss_.get());
      out_->raw(last_val_.table);
      if (image_weights_) image_weights_->set_maps(last_val_.metrics.maps);
    }
    const ValMetrics& m = last_val_.metrics;
    const double fi = fitness(m);
    stop_early = stopper_->update(epoch, fi);
    if (fi > best_fitness_) best_fitness_ = fi;
    // The row first, then the checkpoint: a kill between them leaves a row past the checkpoint's
    // epoch, which --resume drops and writes again.
    const std::vector<double> row = {progress_.mloss[0], progress_.mloss[1], progress_.mloss[2], m.mp, m.mr, m.map50,
                                     m.map, last_val_.box_loss, last_val_.obj_loss, last_val_.cls_loss, lrs[0], lrs[1],
                                     lrs[2]};
    ResultsCsv(save_dir_ + "/results.csv").append(epoch, row);
    if (board_) board_->log_epoch(epoch, row);
    if (!options_.nosave || (final_epoch && options_.evolve == 0)) {
      save_checkpoint_as(last_path_, epoch, EpochProgress{});
      if (best_fitness_ == fi) publish_copy(last_path_, best_path_);
      if (options_.save_period > 0 && epoch % options_.save_period == 0)
        publish_copy(last_path_, weights_dir_ + "/epoch" + std::to_string(epoch) + ".safetensors");
    }
    if (plots()) plot_results(save_dir_ + "/results.csv", save_dir_ + "/results.png");
    if (stop_early)
      out_->line("Stopping training early as no improvement observed in last ", stopper_->patience(),
                 " epochs. Best results observed at epoch ", stopper_->state().best_epoch,
                 ", best model saved as best.safetensors.\nTo change it pass --patience N, or --patience 0 to "
                 "disable early stopping.");
  }
  // Rank 0's early stop, and a signal any rank received meanwhile (during validation, say).
  wait_for_rank0(rank_, str("validation and saving of epoch ", epoch));
  const std::vector<int> raised = ranks_raising(rank_, device_, {stop_early, stop_.received() != 0});
  stop_agreed_ = stop_agreed_ || raised[1] > 0;
  return raised[0] > 0 || stop_agreed_;
}

void Trainer::save_checkpoint_as(const std::string& path, int64_t last_epoch, const EpochProgress& progress) {
  CheckpointInfo info;
  info.epoch = last_epoch;
  info.best_fitness = best_fitness_;
  info.hyp = hyp_;
  info.options = options_json(options_, cfg_text_, num_classes_, names_);
  info.progress = RunProgress{progress, nan_steps_, stopper_->state(), accumulated_, step_->window_nonfinite(),
                              train_index_, image_weights_ ? image_weights_->maps() : std::vector<double>{}}
                      .to_json();
  TrainingObjects objs{model_.get(), ema_.get(), optimizer_.get(), schedule_.get(), scaler_.get()};
  save_checkpoint(path, objs, info, accumulated_ ? trainable() : PendingGradients{});
}

// An epoch cut short by a signal: last holds it up to the batch reached, and no results row.
void Trainer::save_interrupted(int epoch) {
  if (rank_.main()) {
    save_checkpoint_as(last_path_, epoch - 1, progress_);
    out_->line("\nInterrupted in epoch ", epoch, " after batch ", progress_.next_batch, "/", batches_per_epoch_, ": saved ", last_path_);
  }
}

// As the reference's strip_optimizer once a run has ended (all epochs, or an early stop; not an
// interruption, whose last must stay resumable): last and best keep the EMA weights in float16.
// The epoch<N> copies keep the full state.
void Trainer::strip_final_checkpoints() {
  for (const std::string& path : {last_path_, best_path_}) {
    if (!fs::exists(path)) continue;
    const uint64_t bytes = strip_checkpoint(path);
    char size[32];
    std::snprintf(size, sizeof size, "%.1fMB", bytes / 1e6);
    out_->line("Optimizer stripped from ", path, ", ", size);
  }
}

int Trainer::finish(bool interrupted) {
  const double hours = std::chrono::duration<double>(Clock::now() - t_start_).count() / 3600.0;
  if (rank_.main() && !interrupted) strip_final_checkpoints();
  // As the reference: the best weights validated once more (the stripped file, which is what the
  // run hands on), with plots (also after an early stop or an interruption).
  if (rank_.main() && fs::exists(best_path_)) {
    out_->line("\nValidating ", best_path_, "...");
    load_inference_weights(*ema_model_, best_path_);
    out_->line("Fusing layers... \n", ema_model_->summary(640, /*fused=*/true));  // as attempt_load there
    validator_->set_plots(plots());
    validator_->set_verbose(true);
    out_->raw(validator_->run(*ema_model_, compute_loss_.get()).table);
  }
  if (rank_.main() && results_) {
    const ValMetrics& m = last_val_.metrics;
    *results_ = {m.mp, m.mr, m.map50, m.map, last_val_.box_loss, last_val_.obj_loss, last_val_.cls_loss};
  }
  if (board_) board_->log_result_plots(std::max(last_completed_, 0));
  if (nan_steps_) out_->line(nan_steps_, " steps with a NaN/Inf loss were skipped in total");
  if (step_ && step_->graphs_on()) {
    const GraphStats& g = step_->graph_stats();
    out_->line("CUDA graphs: ", g.replays, " of ", g.replays + g.eager_steps, " batches replayed from ", g.captures,
               " capture", g.captures == 1 ? "" : "s",
               step_->graphs_disabled_reason().empty() ? std::string() : "; given up: " + step_->graphs_disabled_reason());
  }
  const int completed = std::max(0, last_completed_ - start_epoch_ + 1);
  out_->line(str("\n", completed, " epoch", completed == 1 ? "" : "s", " completed in ", short_number(hours), " hours."));
  out_->line("Results saved to ", save_dir_);
  wait_for_rank0(rank_, "the final validation");
  if (!interrupted) return 0;
  const int sig = stop_.received() ? stop_.received() : SIGTERM;
  out_->line("Stopped by ", sig == SIGINT ? "SIGINT" : "SIGTERM", " (exit status ", 128 + sig, "); continue with: kestrel train --resume ",
             last_path_);
  return 128 + sig;
}

}  // namespace

int train(const TrainOptions& options) { return Trainer(options, nullptr).run(); }
int train(const TrainOptions& options, TrainResults* results) { return Trainer(options, results).run(); }

}  // namespace kestrel::yolo
