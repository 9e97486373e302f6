// The Trainer's model and optimization phases, in train.py's order: the model from --cfg and
// --weights, frozen layers, the image size, the ranks' agreement, AutoAnchor and label plots, the
// model on its device (SyncBN, broadcast), the EMA; then the optimizer, the train loader, the
// schedule, the Reducer, the loss, the validator and the step.
#include "yolo/train/trainer_run.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "dist/env.h"
#include "dist/sync_batchnorm.h"
#include "engine/safetensors_tensors.h"
#include "yolo/common/text_file.h"
#include "yolo/data/sampler.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plots.h"
#include "yolo/train/autoanchor.h"
#include "yolo/train/cuda_graph_choice.h"
#include "yolo/train/freeze.h"
#include "yolo/train/rank_agreement.h"
#include "yolo/train/rank_collectives.h"

namespace kestrel::yolo {
namespace {

// The reference's convert_sync_batchnorm: every BatchNorm2d combines its statistics over `group`.
layers::BatchNorm2d::NormFn sync_batch_norm_over(std::shared_ptr<dist::ProcessGroup> group) {
  return [group](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                 bool training, double momentum, double eps, const Tensor& batches_tracked) {
    return dist::sync_batch_norm(x, w, b, rm, rv, training, momentum, eps, group, batches_tracked);
  };
}

}  // namespace

// --- the model ---------------------------------------------------------------------------------

void Trainer::build_model() {
  std::optional<SafetensorsFile> weights;
  if (!options_.weights.empty() && !resume_) weights = read_weights_file(options_.weights);
  // A resumed run rebuilds the model its checkpoint holds (its yaml travels in the options).
  const json::Value* saved_yaml = resume_ ? resume_->info.options.find("cfg_yaml") : nullptr;
  KESTREL_CHECK(saved_yaml || !options_.cfg.empty() || weights, "no model: give --cfg or --weights");
  cfg_text_ = saved_yaml ? saved_yaml->as_string() : options_.cfg.empty() ? weights_model_yaml(*weights) : read_text(options_.cfg);
  model_config_ = parse_model_config(
      cfg_text_, !options_.cfg.empty() ? options_.cfg : saved_yaml ? resume_->path + " (its model yaml)" : options_.weights + " (its model yaml)");
  if (hyp_.anchors > 0) {  // the hyp's anchor count replaces the yaml's anchors; AutoAnchor sets them
    out_->line("Overriding model.yaml anchors with anchors=", short_number(hyp_.anchors));
    model_config_.anchors.clear();
    model_config_.anchors_per_level = static_cast<int>(std::lround(hyp_.anchors));
  }
  // SyncBN is chosen here, when the model is built; the reference's "Using SyncBatchNorm()" line
  // comes where it converts the model (place_model).
  const bool sync_bn = options_.sync_bn && rank_.world > 1;
  model_ = task_->make_model(model_config_, num_classes_, options_.seed,
                             sync_bn ? sync_batch_norm_over(rank_.group) : layers::BatchNorm2d::NormFn{});
  // The reference's parse_model table and summary as its Model() logs them (GFLOPs at 640).
  if (out_->on()) out_->raw(task_->describe(640));
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
}

void Trainer::freeze_layers() {
  const int layers = static_cast<int>(model_config_.rows.size());
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
}

void Trainer::check_image_size() {
  const std::vector<double>& strides = task_->head().strides;
  max_stride_ = std::max(static_cast<int>(*std::max_element(strides.begin(), strides.end())), 32);
  img_size_ = options_.img_size;
  if (img_size_ % max_stride_ != 0) {  // the reference's check_img_size: round up, say so
    img_size_ = (options_.img_size + max_stride_ - 1) / max_stride_ * max_stride_;
    out_->line("WARNING: --img-size ", options_.img_size, " must be a multiple of the max stride ", max_stride_,
               ", updating to ", img_size_);
  }
}

void Trainer::check_ranks_agree() {
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& [n, p] : model_->named_parameters()) shapes.emplace_back(n, p.shape());
  std::vector<std::pair<std::string, std::string>> flags;
  for (const auto& kv : options_.to_pairs())
    if (kv.first != "device" && kv.first != "workers") flags.push_back(kv);
  yolo::check_ranks_agree(rank_, device_, run_fingerprint(train_split_.records, shapes, flags));
}

void Trainer::check_anchors_and_plot_labels() {
  // AutoAnchor on rank 0, before the weights are shared.
  if (rank_.main() && !options_.noautoanchor && !resume_) {
    Generator anchor_gen(options_.seed, 7);
    autoanchor_report_ = check_anchors(train_split_.records, task_->head(), hyp_.anchor_t, img_size_, anchor_gen);
  }
  if (rank_.main() && plots() && !resume_) {
    // Said after AutoAnchor's report, which is said later (build_validator), as the reference says both.
    autoanchor_report_ += "Plotting labels to " + save_dir_ + "/labels.jpg... \n";
    plot_labels(train_split_.records, names_, save_dir_ + "/labels.jpg");
    plot_labels_correlogram(train_split_.records, save_dir_ + "/labels_correlogram.jpg");
  }
  wait_for_rank0(rank_, "AutoAnchor and label plots");
}

// train.py's (and segment/train.py's) model.half().float() after AutoAnchor: a fresh run starts
// from weights, anchors and BN statistics rounded to float16 values; a resumed run keeps its own.
// Not a detail: the first step's gradients from rounded and unrounded yolov5n weights differ by
// about 10 % (their norm, measured on 16 coco128 images at 160), and training from the unrounded
// ones followed a different path (its losses 20-30 % lower after 300 epochs on those images).
// Rank 0 only, as the reference; place_model() shares its weights with the other ranks.
std::string Trainer::cache_mode_name() const {
  return options_.cache == CacheMode::Disk ? "disk" : options_.cache == CacheMode::Ram ? "ram" : "";
}

void Trainer::pre_reduce_precision() {
  if (rank_.main() && !resume_) round_to_half_precision(*model_);
}

void Trainer::place_model() {
  model_->to(device_);
  layers::set_conv_operands(*model_, precision_.conv_operands);  // the EMA model validates in float32
  layers::set_conv_math(*model_, options_.tf32, options_.deterministic);
  if (options_.sync_bn && rank_.world > 1) out_->line("Using SyncBatchNorm()");
  for (auto& b : model_->named_buffers())
    if (b.second.device() == device_) device_buffers_.push_back(b);
  if (rank_.world > 1) {  // identical weights everywhere before the optimizer exists
    dist::NamedTensors all = model_->named_parameters();
    for (auto& b : device_buffers_) all.push_back(b);
    dist::broadcast_tensors(*rank_.group, all, 0);
  }
}

void Trainer::build_ema() {
  if (!rank_.main()) return;
  ema_model_ = task_->make_ema_model(model_config_, num_classes_, options_.seed);
  ema_model_->to(device_);
  layers::set_conv_math(*ema_model_, options_.tf32, options_.deterministic);
  ema_ = std::make_unique<ModelEma>(ema_model_, *model_);
}

// --- optimization ------------------------------------------------------------------------------

void Trainer::build_optimizer() {
  const double wd = scaled_weight_decay(hyp_.weight_decay, options_.batch_size);
  optimizer_ = std::make_unique<Optimizer>(smart_optimizer(*model_, options_.optimizer, hyp_.lr0, hyp_.momentum, wd));
  out_->line(out_->colour("optimizer: "), optimizer_->describe());
  say_train_scan();
}

void Trainer::build_train_loader() {
  const int batch = batch_per_rank();
  data::PipelineOptions popt;
  popt.img_size = img_size_;
  popt.augment = true;
  popt.rect = options_.rect;
  popt.batch_size = batch;
  popt.stride = max_stride_;
  popt.pad = 0.0;
  popt.hyp = hyp_;
  data::AugmentPipeline* pipeline = &task_->make_pipeline(train_split_.records, popt);
  // --cache ram that does not fit is said as the reference's check_cache_ram, before loading, and
  // training goes on reading the images.
  const std::string cached = data::cache_dataset_images(*pipeline, cache_mode_name(), std::max(1, options_.workers));
  if (!cached.empty()) out_->line(out_->colour("train: "), cached);
  const data::DistributedSampler sampler(pipeline->size(), rank_.rank, rank_.world, !options_.rect, options_.seed);
  const int local_ranks = dist::local_world_size(dist::process_environment());
  if (!pipeline->cached()) {  // images decode once while a quarter of the free memory lasts
    pipeline->keep_decoded_images(data::default_image_cache_budget(local_ranks));
    out_->line(out_->colour("train: "), data::image_cache_line(*pipeline));
  }
  workers_ = data::dataloader_workers(cores(), local_ranks, batch, pipeline->size(), options_.workers);
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
  batches_per_epoch_ = task_->make_loader(lopt, std::move(order));
}

void Trainer::build_schedule() {
  schedule_ = std::make_unique<LrSchedule>(hyp_, options_.epochs, options_.cos_lr, options_.batch_size, batches_per_epoch_, *optimizer_);
  scaler_ = std::make_unique<GradScaler>(compute_ == DType::F16);
  stopper_ = std::make_unique<EarlyStopping>(options_.patience);
}

void Trainer::build_reducer() {
  if (rank_.world == 1) return;
  dist::ReducerOptions ropt;
  ropt.bucket_cap_mb = options_.bucket_cap_mb;
  ropt.edge_bucket_cap_mb = options_.edge_bucket_mb;
  ropt.overlap = !options_.no_overlap;
  ropt.timed_buckets = options_.timed_buckets;
  ropt.compress = options_.grad_compress;
  ropt.record_timeline = !options_.trace.empty();
  reducer_ = std::make_unique<dist::Reducer>(trainable(), rank_.group, ropt);
  // DDP's broadcast_buffers: the structure is compared across ranks here, once.
  if (!options_.sync_bn) buffer_broadcaster_ = std::make_unique<dist::TensorBroadcaster>(rank_.group, device_buffers_, 0);
}

void Trainer::build_loss() {
  const int nl = static_cast<int>(task_->head().nl);
  task_->build_loss(scale_loss_hyp(hyp_, nl, num_classes_, img_size_));
  // Before any validation ran (--noval), results.csv records zeros, as the reference's results.
  last_val_.metrics.assign(task_->results_columns().size() - task_->loss_names().size() - 3, 0.0);
}

void Trainer::build_validator() {
  if (rank_.main()) {
    data::DatasetSplit val_split = data::load_split(*dataset_config_, "val", dataset_config_->nc, options_.single_cls,
                                                    true, 0, false, task_->polygons());
    out_->line("val: ", val_split.summary);
    for (const auto& w : val_split.warnings) out_->line("val: ", w);
    const int batch = batch_per_rank();
    ValOptions vopt;
    vopt.img_size = img_size_;
    vopt.batch_size = batch * 2;
    vopt.single_cls = options_.single_cls;
    // Validation runs in the training's activation type, as the reference validates in float16
    // during GPU training; on the CPU, detection's --amp bf16 validates on bfloat16 activations (as
    // val --half there) and segmentation in float32 (as segment val --half there).
    vopt.compute_dtype = device_.is_cpu() && task_->polygons() ? DType::F32 : compute_;
    // As the reference's val loader in training: twice the batch and twice the workers.
    vopt.workers = data::dataloader_workers(cores(), dist::local_world_size(dist::process_environment()),
                                            int64_t{batch} * 2, static_cast<int64_t>(val_split.records.size()),
                                            options_.workers * 2);
    vopt.save_dir = save_dir_;
    vopt.training = true;
    // train.py's val loader takes --cache unless --noval (cache=None if noval else opt.cache).
    if (!options_.noval) vopt.cache = cache_mode_name();
    task_->build_validator(std::move(val_split.records), names_, num_classes_, vopt, device_, max_stride_, &*out_);
  }
  out_->raw(autoanchor_report_);  // the reference checks the anchors once both loaders exist
  autoanchor_report_.clear();
  wait_for_rank0(rank_, "the val label cache");
}

void Trainer::build_step() {
  if (!options_.trace.empty()) trace_ = std::make_unique<dist::TraceWriter>(rank_.rank);
  TrainStepParts parts;
  parts.objective = &task_->objective();
  parts.optimizer = optimizer_.get();
  parts.scaler = scaler_.get();
  parts.ema = ema_.get();
  parts.reducer = reducer_.get();
  parts.buffers = buffer_broadcaster_.get();
  TrainStepOptions sopt;
  sopt.graphs = cuda_graphs_wanted(options_, device_, rank_, task_->graph_obstacle()) ? GraphMode::On : GraphMode::Off;
  sopt.capture_failure_fatal = options_.cuda_graph == CudaGraphMode::On;  // auto: a failed capture falls back
  sopt.loss_factor = options_.quad ? 4.0 : 1.0;  // --quad's batches hold a quarter of the images
  step_ = std::make_unique<TrainStep>(parts, rank_, device_, sopt);
  BatchPrepOptions bopt;
  bopt.multi_scale = options_.multi_scale;
  bopt.seed = options_.seed;
  bopt.rank = rank_.rank;
  bopt.img_size = img_size_;
  bopt.stride = max_stride_;
  if (sopt.graphs == GraphMode::On && rank_.world > 1)
    bopt.target_rows = run_target_rows(train_split_.records, batch_per_rank(), hyp_, options_.rect);
  batch_prep_ = std::make_unique<BatchPrep>(task_->target_check(), device_, compute_, bopt);
}

dist::NamedTensors Trainer::trainable() const {
  dist::NamedTensors out;
  for (auto& [n, p] : model_->named_parameters())
    if (p.requires_grad()) out.emplace_back(n, p);
  return out;
}

}  // namespace kestrel::yolo
