#include "yolo/train/classify_trainer.h"

#include <chrono>
#include <csignal>
#include <exception>
#include <type_traits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "dist/ddp.h"
#include "dist/env.h"
#include "dist/reducer.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/ops/cross_entropy.h"
#include "layers/conv.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/common/stop_signal.h"
#include "yolo/common/version.h"
#include "yolo/data/classify_dataset.h"
#include "yolo/data/classify_loader.h"
#include "yolo/data/loader.h"
#include "yolo/eval/classify_validator.h"
#include "yolo/model/classifier_file.h"
#include "yolo/model/pt_writer.h"
#include "yolo/model/weights.h"
#include "yolo/plot/plot_classify.h"
#include "yolo/plot/plots.h"
#include "yolo/plot/training_board.h"
#include "yolo/train/device_choice.h"
#include "yolo/data/dataset_fingerprint.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/ema.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/reference_checkpoint.h"
#include "yolo/train/reference_opt.h"
#include "yolo/train/train_resume.h"
#include "yolo/train/rank_collectives.h"
#include "yolo/train/rank_info.h"
#include "yolo/train/run_files.h"

namespace kestrel::yolo {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The reference's final learning rate fraction and its linear schedule, per epoch.
constexpr double kLrf = 0.01;
double linear_lr_factor(int epoch, int epochs) {
  return (1.0 - static_cast<double>(epoch) / epochs) * (1.0 - kLrf) + kLrf;
}

std::string yaml_text(const std::string& s) { return s.empty() ? "''" : s; }
std::string yaml_bool(bool b) { return b ? "true" : "false"; }

// GenericLogger's results.csv: '%23s,' names, '%23.5g,' values, the header with the first row.
void append_results(const std::string& path, const std::vector<std::pair<std::string, double>>& row, int epoch) {
  std::string text;
  {
    std::ifstream in(path);
    if (in) text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  char cell[64];
  if (text.empty()) {
    std::snprintf(cell, sizeof cell, "%23s", "epoch");
    text += cell;
    for (const auto& [k, v] : row) std::snprintf(cell, sizeof cell, ",%23s", k.c_str()), text += cell;
    text += "\n";
  }
  std::snprintf(cell, sizeof cell, "%23.5g", static_cast<double>(epoch));
  text += cell;
  for (const auto& [k, v] : row) std::snprintf(cell, sizeof cell, ",%23.5g", v), text += cell;
  text += "\n";
  write_file_atomic(path, text);
}

std::string epoch_columns(int epoch, int epochs, double mem_gb) {
  char mem[32], line[64];
  std::snprintf(mem, sizeof mem, "%.3gG", mem_gb);
  std::snprintf(line, sizeof line, "%10s%10s", str(epoch + 1, "/", epochs).c_str(), mem);
  return line;
}

std::string g12(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%12.3g", v);
  return b;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ClassifyTrainOptions::to_pairs(const std::string& save_dir) const {
  auto opt_int = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("null"); };
  return {{"model", yaml_text(model)},
          {"data", yaml_text(data)},
          {"epochs", std::to_string(epochs)},
          {"batch_size", std::to_string(batch_size)},
          {"imgsz", std::to_string(imgsz)},
          {"nosave", yaml_bool(nosave)},
          {"cache", cache.empty() ? "null" : cache},
          {"device", yaml_text(device)},
          {"workers", std::to_string(workers)},
          {"project", yaml_text(project)},
          {"name", yaml_text(name)},
          {"exist_ok", yaml_bool(exist_ok)},
          {"pretrained", yaml_bool(pretrained)},
          {"optimizer", optimizer_kind_name(optimizer)},
          {"lr0", python_float(lr0)},
          {"decay", python_float(decay)},
          {"label_smoothing", python_float(label_smoothing)},
          {"cutoff", opt_int(cutoff)},
          {"dropout", dropout ? python_float(*dropout) : "null"},
          {"verbose", yaml_bool(verbose)},
          {"seed", std::to_string(seed)},
          {"local_rank", "-1"},
          {"save_dir", save_dir},
          {"amp", amp == AmpMode::Auto ? "''" : amp_mode_name(amp)}};
}

ClassifyTrainOptions ClassifyTrainOptions::from_pairs(const json::Value& pairs, const std::string& path) {
  KESTREL_CHECK(pairs.is_object(), "checkpoint '", path, "': its classify options are not a JSON object; the file is damaged");
  ClassifyTrainOptions o;
  auto text = [&](const char* key) -> std::optional<std::string> {
    const json::Value* v = pairs.find(key);
    if (!v) return std::nullopt;
    KESTREL_CHECK(v->is_string(), "checkpoint '", path, "': option ", key, " is not a string; the file is damaged");
    const std::string t = v->as_string();
    return t == "''" ? std::string() : t;
  };
  auto number = [&](const char* key, auto& out) {
    const std::optional<std::string> t = text(key);
    if (!t) return;
    try {
      size_t used = 0;
      const double v = std::stod(*t, &used);
      KESTREL_CHECK(used == t->size(), "");
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    } catch (const std::exception&) {
      KESTREL_FAIL("checkpoint '", path, "': option ", key, " is '", *t, "', not a number; the file is damaged");
    }
  };
  auto flag = [&](const char* key, bool& out) {
    if (const std::optional<std::string> t = text(key)) out = *t == "true";
  };
  if (auto t = text("model")) o.model = *t;
  if (auto t = text("data")) o.data = *t;
  number("epochs", o.epochs);
  number("batch_size", o.batch_size);
  number("imgsz", o.imgsz);
  flag("nosave", o.nosave);
  if (auto t = text("cache")) o.cache = *t == "null" ? "" : *t;
  if (auto t = text("device")) o.device = *t;
  number("workers", o.workers);
  if (auto t = text("project")) o.project = *t;
  if (auto t = text("name")) o.name = *t;
  flag("exist_ok", o.exist_ok);
  flag("pretrained", o.pretrained);
  if (auto t = text("optimizer")) o.optimizer = parse_optimizer_kind(*t);
  number("lr0", o.lr0);
  number("decay", o.decay);
  number("label_smoothing", o.label_smoothing);
  if (auto t = text("cutoff"); t && *t != "null") {
    int c = 0;
    number("cutoff", c);
    o.cutoff = c;
  }
  if (auto t = text("dropout"); t && *t != "null") {
    double d = 0;
    number("dropout", d);
    o.dropout = d;
  }
  flag("verbose", o.verbose);
  number("seed", o.seed);
  if (auto t = text("amp")) o.amp = parse_amp_mode(*t);
  return o;
}

namespace {

// A checkpoint's "options": the task, what a classifier file carries (the model yaml as cfg_yaml,
// names, nc, imgsz) and the run's options (to_pairs).
json::Value checkpoint_options(const ClassifyTrainOptions& o, const std::string& save_dir, const ClassificationModel& model,
                               const std::vector<std::string>& names, const DatasetFingerprint& train_index) {
  json::Array list;
  for (const auto& n : names) list.emplace_back(n);
  json::Object opt;
  for (const auto& [k, v] : o.to_pairs(save_dir)) opt.emplace_back(k, v);
  return json::Object{{"task", json::Value("classify")},
                      {"cfg_yaml", json::Value(model_config_yaml(model.config()))},
                      {"names", json::Value(std::move(list))},
                      {"nc", json::Value(static_cast<int64_t>(model.nc()))},
                      {"imgsz", json::Value(static_cast<int64_t>(o.imgsz))},
                      {"train_index", train_index.to_json()},
                      {"opt", json::Value(std::move(opt))}};
}

}  // namespace

int train_classifier(const ClassifyTrainOptions& requested, ClassifyTrainResults* results) {
  // --resume: the checkpoint's options, but for what cannot change the result.
  ClassifyTrainOptions o = requested;
  std::optional<CheckpointInfo> resumed;
  std::string resume_path;
  if (requested.resume) {
    resume_path = requested.resume->empty() ? latest_checkpoint(requested.project) : *requested.resume;
    KESTREL_CHECK(!resume_path.empty(), "--resume: no weights/last.safetensors under ", requested.project,
                  "; give the checkpoint to continue (--resume runs/train-cls/exp/weights/last.safetensors)");
    resumed = read_checkpoint_info(resume_path);
    KESTREL_CHECK(!resumed->stripped, "--resume ", resume_path, ": its run finished, and its weights were stripped to ",
                  "the EMA in float16 with nothing to resume from; to train on from them, start a new run with --model ",
                  resume_path);
    check_resumable(*resumed, resume_path);
    const json::Value* task = resumed->options.find("task");
    const json::Value* pairs = resumed->options.find("opt");
    KESTREL_CHECK(task && task->is_string() && task->as_string() == "classify" && pairs, "--resume ", resume_path,
                  ": not a classifier's training checkpoint; resume detection runs with kestrel train --resume");
    o = ClassifyTrainOptions::from_pairs(*pairs, resume_path);
    o.device = requested.device;
    o.workers = requested.workers;
    o.noplots = requested.noplots;
    o.no_tensorboard = requested.no_tensorboard;
    o.max_batches = requested.max_batches;
    o.interrupt_after = requested.interrupt_after;
  }
  KESTREL_CHECK(o.epochs >= 1, "--epochs must be at least 1, got ", o.epochs);
  KESTREL_CHECK(o.batch_size >= 1, "--batch-size must be at least 1, got ", o.batch_size);
  KESTREL_CHECK(o.imgsz >= 32, "--imgsz must be at least 32, got ", o.imgsz);
  KESTREL_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1, "--label-smoothing must be in [0, 1], got ",
                o.label_smoothing);
  KESTREL_CHECK(!o.dropout || (*o.dropout >= 0 && *o.dropout < 1), "--dropout must be in [0, 1), got ", *o.dropout);
  // Data-parallel when a launcher started this process: the reference's DDP (gradients averaged
  // over ranks, rank 0's buffers broadcast before every forward), each rank with batch / world
  // images of a DistributedSampler's share; rank 0 alone validates, prints and saves.
  const dist::DistOptions dopt = dist::resolve_dist_options(dist::DistFlags{}, dist::process_environment());
  RankInfo rank;
  rank.rank = dopt.rank, rank.world = dopt.world_size, rank.local = dopt.local_rank;
  // How long the other ranks wait while rank 0 validates and saves alone: train's default.
  rank.phase_limit = std::chrono::milliseconds(static_cast<int64_t>(TrainOptions{}.dist_phase_timeout * 1000));
  const Console out(rank.main());
  KESTREL_CHECK(o.batch_size % rank.world == 0, "--batch-size ", o.batch_size, " must be a multiple of the world size ",
                rank.world);
  StopSignal stop;
  const Device device = pick_device(o.device, rank.world > 1 ? rank.local : -1);
  out.line(startup_line(device));
  if (rank.world > 1) rank.group = dist::init_process_group(device.is_cuda() ? "nccl" : "gloo", dopt, device);
  // The head's pooling, linear layer and cross-entropy have no bfloat16 CPU kernels: on the CPU,
  // --amp bf16 rounds the convolutions' operands and keeps float32 activations.
  const Precision precision = pick_precision(o.amp, device, CpuMixed::Operands);
  const DType compute = precision.activations;
  const uint64_t seed = static_cast<uint64_t>(o.seed);  // the model's and the data order's, every rank

  // The dataset first: a wrong --data fails before a run directory exists.
  const std::string root = data::resolve_classify_data(o.data);
  const data::ClassifyDataset dataset = data::load_classify_dataset(root);
  const int nc = static_cast<int>(dataset.classes.size());
  const data::ClassifyCacheMode cache = data::parse_classify_cache(o.cache);

  // The model next (a --model that cannot be read fails before a run directory exists); a resumed
  // run's from its checkpoint's yaml, its weights restored below.
  LoadedClassifier loaded;
  if (resumed) {
    const json::Value* yaml = resumed->options.find("cfg_yaml");
    KESTREL_CHECK(yaml && yaml->is_string(), "--resume ", resume_path, ": the checkpoint has no model yaml; the file is damaged");
    loaded.model = std::make_shared<ClassificationModel>(parse_model_config(yaml->as_string(), resume_path), seed);
    KESTREL_CHECK(loaded.model->nc() == nc, "--resume ", resume_path, ": the run trained ", loaded.model->nc(),
                  " classes but ", root, " has ", nc);
  } else {
    loaded = load_classifier_for_training(o.model, nc, o.cutoff, o.pretrained, seed);
    if (loaded.from_detector && fs::path(o.model).extension() != ".yaml" && fs::path(o.model).extension() != ".yml")
      out.line("WARNING ⚠️ pass YOLOv5 classifier model with '-cls' suffix, i.e. '--model yolov5s-cls.pt'");
  }

  RunFilesOptions fo;
  fo.project = o.project;
  fo.name = o.name;
  fo.exist_ok = o.exist_ok;
  if (resumed) fo.resume_dir = fs::path(resume_path).parent_path().parent_path().string();
  RunFiles files(rank, device, fo);
  const std::string& save_dir = files.save_dir();
  const std::string& last = files.last();
  const std::string& best = files.best();
  // A run that fails at start-up leaves no run directory of its own behind (disarmed before the
  // first epoch; the event file, opened later, is closed first).
  struct NewRunGuard {
    RunFiles& files;
    bool armed = true;
    ~NewRunGuard() {
      if (armed && std::uncaught_exceptions() > 0) files.discard();
    }
  } new_run{files};
  if (rank.main()) write_yaml_pairs(save_dir + "/opt.yaml", o.to_pairs(save_dir));
  const DatasetFingerprint train_index = dataset_fingerprint([&] {
    std::vector<std::string> paths;
    for (const data::ClassifySample& sample : dataset.train.samples) paths.push_back(sample.path);
    return paths;
  }());

  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int nw = std::min(std::max(cores - 1, 0), o.workers);
  data::ClassifyLoaderOptions train_lo;
  train_lo.size = o.imgsz;
  train_lo.batch_size = o.batch_size / rank.world;
  train_lo.rank = rank.rank;
  train_lo.world = rank.world;
  train_lo.augment = true;
  train_lo.shuffle = true;
  train_lo.seed = seed;
  train_lo.cache = cache;
  const int local_ranks = dist::local_world_size(dist::process_environment());
  train_lo.workers = data::dataloader_workers(cores, local_ranks, train_lo.batch_size,
                                              static_cast<int64_t>(dataset.train.samples.size()), nw);
  data::ClassifyLoader train_loader(dataset.train.samples, train_lo);
  data::ClassifyLoaderOptions test_lo = train_lo;
  test_lo.rank = 0, test_lo.world = 1;
  test_lo.batch_size = train_lo.batch_size * 2;
  test_lo.augment = false;
  test_lo.shuffle = false;
  test_lo.workers = data::dataloader_workers(cores, local_ranks, test_lo.batch_size,
                                             static_cast<int64_t>(dataset.test.samples.size()), nw);
  data::ClassifyLoader test_loader(dataset.test.samples, test_lo);

  ClassificationModel& model = *loaded.model;
  if (o.dropout) model.head().drop->p = *o.dropout;
  model.head().drop->generator = Generator(seed, 1);
  model.to(device);
  layers::set_conv_operands(model, precision.conv_operands);  // the EMA validates in float32
  model.train(true);
  for (auto& [name, p] : model.named_parameters()) p.set_requires_grad(true);
  dist::NamedTensors buffers = model.named_buffers();
  std::unique_ptr<dist::Reducer> reducer;
  std::unique_ptr<dist::TensorBroadcaster> buffer_broadcaster;
  if (rank.world > 1) {  // identical weights everywhere, then DDP's gradient all-reduce
    dist::NamedTensors all = model.named_parameters();
    all.insert(all.end(), buffers.begin(), buffers.end());
    dist::broadcast_tensors(*rank.group, all, 0);
    reducer = std::make_unique<dist::Reducer>(model.named_parameters(), rank.group);
    buffer_broadcaster = std::make_unique<dist::TensorBroadcaster>(rank.group, buffers, 0);
  }
  const std::vector<std::string>& names = dataset.classes;
  out.line(model.summary(o.imgsz));

  // The reference's GenericLogger writes TensorBoard events beside results.csv.
  std::optional<TrainingBoard> board;
  if (rank.main() && !o.no_tensorboard) {
    board.emplace(save_dir, resumed ? std::optional<int64_t>(resumed->epoch + 1) : std::nullopt);
    out.line(out.colour("TensorBoard: "), "Start with 'tensorboard --logdir ", fs::path(save_dir).parent_path().string(),
             "', view at http://localhost:6006/");
  }
  if (rank.main() && !o.noplots && !resumed) {
    train_loader.start_epoch(0);
    if (std::optional<data::ClassifyBatch> b = train_loader.next()) {
      plot_classify_images(b->images, b->labels, {}, names, save_dir + "/train_images.jpg");
      if (board) board->log_image(save_dir + "/train_images.jpg", 0);
    }
  }

  Optimizer optimizer = smart_optimizer(model, o.optimizer, o.lr0, 0.9, o.decay);
  out.line(out.colour("optimizer:"), " ", optimizer.describe());
  if (compute != DType::F32 || precision.conv_operands != ops::ConvOperands::Float32)
    out.line(out.colour("AMP: "), precision.describe());
  GradScaler scaler(compute == DType::F16);  // float16 activations: the reference's GradScaler
  std::unique_ptr<ModelEma> ema;  // rank 0's
  if (rank.main()) {
    auto ema_model = std::make_shared<ClassificationModel>(model.config(), seed);
    ema_model->to(device);
    ema = std::make_unique<ModelEma>(ema_model, model);
  }
  int start_epoch = 0;
  int64_t first_batch = 0;  // of start_epoch: where a run stopped inside it resumes
  double best_fitness = 0, resumed_tloss = 0;
  if (resumed) {  // every rank reads the same file: the same weights everywhere
    const CheckpointInfo info = load_checkpoint(resume_path, {&model, ema.get(), &optimizer, nullptr, &scaler});
    start_epoch = static_cast<int>(info.epoch) + 1;
    best_fitness = info.best_fitness;
    for (const GeneratorState& g : info.generators)
      if (g.name == "dropout") model.head().drop->generator = restore_generator(g);
    if (const json::Value* next = info.progress.find("next_batch"); next && next->as_integer() > 0) {
      start_epoch = static_cast<int>(info.progress.find("epoch")->as_integer());
      first_batch = next->as_integer();
      resumed_tloss = info.progress.find("tloss")->as_real();
    }
    const json::Value* saved_index = info.options.find("train_index");
    const std::string note = check_resume_dataset(
        saved_index ? std::optional<DatasetFingerprint>(DatasetFingerprint::from_json(*saved_index, resume_path)) : std::nullopt,
        train_index, first_batch, train_loader.len(), resume_path);
    if (!note.empty()) out.line(note);
    KESTREL_CHECK(start_epoch < o.epochs, "--resume ", resume_path, ": its run finished all ", o.epochs,
                  " epochs; nothing to resume");
    out.line("Resuming training from ", resume_path, " from epoch ", start_epoch + 1,
             first_batch ? str(", batch ", first_batch + 1) : std::string(), " to ", o.epochs, " total epochs");
  }
  // A checkpoint of everything --resume needs (stripped when the run ends); `progress` says where a
  // run stopped inside an epoch stands ({} at an epoch's end). The one before stays as
  // last.prev.safetensors while the run lasts.
  const auto save_last = [&](int64_t completed_epoch, json::Value progress) {
    CheckpointInfo info;
    info.epoch = completed_epoch;
    info.best_fitness = best_fitness;
    info.options = checkpoint_options(o, save_dir, model, names, train_index);
    info.generators = {generator_state("dropout", model.head().drop->generator)};
    info.progress = std::move(progress);
    files.keep_previous();
    save_checkpoint(last, {&model, ema.get(), &optimizer, nullptr, &scaler}, info);
  };
  // classify/train.py's own last.pt of the epoch just completed (beside the .safetensors, for the
  // reference's classify/val.py, predict.py and export.py): the EMA in float16, no optimizer.
  const std::string last_pt = fs::path(last).replace_extension(".pt").string();
  const std::string best_pt = fs::path(best).replace_extension(".pt").string();
  const auto save_last_pt = [&](int64_t completed_epoch) {
    PtWriteOptions pt;
    pt.names = names;
    pt.best_fitness = best_fitness;
    pt.epoch = completed_epoch;
    pt.updates = ema->updates();
    for (const auto& [k, v] : o.to_pairs(save_dir)) pt.opt.emplace_back(k, typed_option_value(v));  // vars(opt)
    pt.date = iso_now();
    write_reference_pt(ema->module(), last_pt, pt);
  };
  // A stop signal, as every rank agrees on it at the same point (any rank's; a collective).
  const auto agreed_stop = [&]() -> int {
    const int mine = stop.received();
    if (rank.world == 1) return mine;
    return ranks_raising(rank, device, {mine != 0})[0] > 0 ? (mine ? mine : SIGTERM) : 0;
  };
  const auto stopped = [&](int sig, int epoch) {
    return Interrupted(sig, str("training stopped by a signal in epoch ", epoch + 1, fs::exists(last) ?
                                "; continue it with kestrel classify train --resume " + last : std::string()));
  };
  new_run.armed = false;

  const std::string val_name = dataset.test_name;
  out.line("Image sizes ", o.imgsz, " train, ", o.imgsz, " test\nUsing ", train_lo.workers, " dataloader workers\n",
           "Logging results to ", out.colour(save_dir), "\nStarting ", o.model, " training on ", o.data, " dataset with ",
           nc, " classes for ", o.epochs, " epochs...\n");
  char header[128];
  std::snprintf(header, sizeof header, "%10s%10s%12s%12s%12s%12s", "Epoch", "GPU_mem", "train_loss",
                (val_name + "_loss").c_str(), "top1_acc", "top5_acc");
  out.line(header);

  const Clock::time_point t0 = Clock::now();
  ClassifyTrainResults r;
  int64_t batches_run = 0;
  r.save_dir = save_dir;
  const std::vector<Tensor> params = optimizer.parameters();
  for (int epoch = start_epoch; epoch < o.epochs; ++epoch) {
    model.train(true);
    const bool resuming_inside = epoch == start_epoch && first_batch > 0;
    train_loader.start_epoch(epoch, resuming_inside ? first_batch : 0);
    const int64_t nb = o.max_batches > 0 ? std::min<int64_t>(o.max_batches, train_loader.len()) : train_loader.len();
    double tloss = resuming_inside ? resumed_tloss : 0.0;
    int64_t i = resuming_inside ? first_batch : 0;
    ProgressCadence cadence = out.cadence();
    const Clock::time_point te = Clock::now();
    const auto mem = [&] { return device.is_cuda() ? allocator_stats(device).reserved / 1e9 : 0.0; };
    while (i < nb) {
      std::optional<data::ClassifyBatch> batch = train_loader.next();
      if (!batch) break;
      Tensor images = batch->images.to(device);
      if (compute != DType::F32) images = images.to(compute);
      const Tensor labels = Tensor::from_vector(batch->labels, {batch->size()}, device);
      if (buffer_broadcaster) buffer_broadcaster->broadcast();
      if (reducer) reducer->prepare_for_backward();
      const Tensor loss = ops::cross_entropy(model.forward(images), labels, o.label_smoothing);  // float32
      scaler.scale(loss).backward();
      if (reducer) reducer->finalize();
      scaler.unscale(optimizer);
      clip_grad_norm(params, 10.0);
      scaler.step(optimizer);
      scaler.update();
      optimizer.zero_grad();
      if (ema) ema->update(model);
      if (++batches_run == o.interrupt_after) stop.raise_as(SIGINT);
      tloss = (tloss * static_cast<double>(i) + loss.item()) / static_cast<double>(i + 1);
      ++i;
      // A stop inside the epoch, agreed by every rank at the same batch: rank 0 saves where it
      // stands (the next batch, the running loss), and every rank ends; --resume continues there.
      if (const int sig = agreed_stop(); sig && i < nb) {
        if (rank.main())
          save_last(epoch - 1, json::Object{{"epoch", json::Value(static_cast<int64_t>(epoch))},
                                            {"next_batch", json::Value(i)}, {"tloss", json::Value(tloss)}});
        throw stopped(sig, epoch);
      }
      const double secs = std::chrono::duration<double>(Clock::now() - te).count();
      if (i < nb && cadence.due(i, nb, secs))
        out.progress(epoch_columns(epoch, o.epochs, mem()) + g12(tloss) + std::string(36, ' ') + ": " +
                         format_bar(i, nb, secs), false);
    }
    // LambdaLR's step, every rank: the next epoch's rate.
    for (size_t g = 0; g < optimizer.groups().size(); ++g) {
      Optimizer::Rates rates = optimizer.rates(g);
      rates.lr = rates.initial_lr * linear_lr_factor(epoch + 1, o.epochs);
      optimizer.set_rates(g, rates);
    }
    r.train_loss = tloss;
    const bool final_epoch = epoch + 1 == o.epochs;
    if (rank.main()) {
      // The last batch's validation, on the EMA (rank 0).
      ClassificationModel& ema_model = dynamic_cast<ClassificationModel&>(ema->module());
      ClassifyValOptions vo;
      vo.label_smoothing = o.label_smoothing;
      vo.action = val_name == "val" ? "validating" : "testing";
      vo.compute = compute;
      const ClassifyValResult v = validate_classifier(ema_model, test_loader, device, vo);
      const double fitness = v.top1;
      const double secs = std::chrono::duration<double>(Clock::now() - te).count();
      out.progress(epoch_columns(epoch, o.epochs, mem()) + g12(tloss) + g12(v.loss) + g12(v.top1) + g12(v.top5) + ": " +
                       format_bar(nb, nb, secs), true);
      if (fitness > best_fitness) best_fitness = fitness;
      const std::vector<std::pair<std::string, double>> metrics = {
          {"train/loss", tloss}, {val_name + "/loss", v.loss}, {"metrics/accuracy_top1", v.top1},
          {"metrics/accuracy_top5", v.top5}, {"lr/0", optimizer.rates(0).lr}};
      append_results(save_dir + "/results.csv", metrics, epoch);
      if (board) board->log_scalars(epoch, metrics);
      if (!o.nosave || final_epoch) {  // --nosave: the final epoch's only (or where a stop leaves it)
        save_last(epoch, json::Object{});
        save_last_pt(epoch);
        if (best_fitness == fitness) {
          publish_copy(last, best);
          publish_copy(last_pt, best_pt);
        }
      }
      r.val_loss = v.loss, r.top1 = v.top1, r.top5 = v.top5;
    }
    // A stop that came during the epoch's last batch or its validation, agreed by every rank.
    wait_for_rank0(rank, str("validation and saving of epoch ", epoch + 1));
    if (const int sig = final_epoch ? 0 : agreed_stop()) {
      if (rank.main() && o.nosave) save_last(epoch, json::Object{});
      throw stopped(sig, epoch + 1);
    }
  }
  r.best_fitness = best_fitness;
  if (!rank.main()) {
    if (results) *results = r;
    return 0;
  }

  // As the reference's checkpoints: the EMA in float16, nothing to resume.
  files.finish();
  const double hours = std::chrono::duration<double>(Clock::now() - t0).count() / 3600.0;
  char done[64];
  std::snprintf(done, sizeof done, "%.3f", hours);
  out.line("\nTraining complete (", done, " hours)\nResults saved to ", out.colour(save_dir),
           "\nPredict:         kestrel classify predict --weights ", best, " --source im.jpg",
           "\nValidate:        kestrel classify val --weights ", best, " --data ", root,
           "\nExport:          kestrel export --weights ", best, " --include onnx\n");
  if (!o.noplots) {
    test_loader.start_epoch(0);
    if (std::optional<data::ClassifyBatch> b = test_loader.next()) {
      const int64_t n = std::min<int64_t>(25, b->size());
      ClassifyMetrics m;
      {
        autograd::NoGradGuard no_grad;
        ema->module().train(false);
        m.add(dynamic_cast<ClassificationModel&>(ema->module()).forward(b->images.to(device)), b->labels);
      }
      std::vector<int64_t> labels(b->labels.begin(), b->labels.begin() + n);
      std::vector<int64_t> pred(m.predictions().begin(), m.predictions().begin() + n);
      plot_classify_images(b->images, labels, pred, names, save_dir + "/test_images.jpg");
      if (board) board->log_image(save_dir + "/test_images.jpg", o.epochs - 1);
    }
    plot_results(save_dir + "/results.csv", save_dir + "/results.png");
    if (board) board->log_result_plots(o.epochs - 1);
  }
  if (results) *results = r;
  return 0;
}

}  // namespace kestrel::yolo
