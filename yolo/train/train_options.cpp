#include "yolo/train/train_options.h"

#include <charconv>
#include <limits>
#include <type_traits>

#include "yolo/common/limits.h"

namespace kestrel::yolo {
namespace {

// Shortest decimals that read back as the same double (std::to_string keeps 6 digits).
std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// The whole text as one number of type T, or OptionError: "expects an integer / a number", or
// "is out of range" for an integer outside T (an int flag never wraps: 4294967304 is not 8).
template <class T>
T parse_number(const std::string& text) {
  constexpr bool integral = std::is_integral_v<T>;
  const char* what = integral ? "expects an integer" : "expects a number";
  if constexpr (integral) {
    using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    Wide v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range && end == text.data() + text.size())
      throw OptionError(text + " is out of range (at most " + std::to_string(std::numeric_limits<T>::max()) + ")");
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
      throw OptionError(std::string(what) + ", got '" + text + "'");
    if (v < static_cast<Wide>(std::numeric_limits<T>::min()) || v > static_cast<Wide>(std::numeric_limits<T>::max()))
      throw OptionError(text + " is out of range (at most " + std::to_string(std::numeric_limits<T>::max()) + ")");
    return static_cast<T>(v);
  } else {
    T v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
      throw OptionError(std::string(what) + ", got '" + text + "'");
    return v;
  }
}

bool parse_switch(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw OptionError("expects true or false, got '" + text + "'");
}

// "10", "0,1,2" (the flag) or "[0, 1, 2]" (opt.yaml's list).
std::vector<int> parse_int_list(const std::string& text) {
  const bool bracketed = text.size() >= 2 && text.front() == '[' && text.back() == ']';
  const std::string inner = bracketed ? text.substr(1, text.size() - 2) : text;
  std::vector<int> out;
  if (bracketed && inner.find_first_not_of(' ') == std::string::npos) return out;  // "[]": none
  size_t start = 0;
  for (;;) {
    const size_t comma = inner.find(',', start);
    std::string part = inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    try {
      out.push_back(parse_number<int>(part));
    } catch (const OptionError&) {
      throw OptionError("expects integers like 10 or 0,1,2, got '" + text + "'");
    }
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string int_list_text(const std::vector<int>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// Field readers and writers, one per field type; the table below binds them to fields.
template <auto F>
void read_text(TrainOptions& o, const std::string& t) { o.*F = t; }
template <auto F>
std::string write_text(const TrainOptions& o) { return o.*F; }
template <auto F>
void read_switch(TrainOptions& o, const std::string& t) { o.*F = parse_switch(t); }
template <auto F>
std::string write_switch(const TrainOptions& o) { return o.*F ? "true" : "false"; }
template <auto F>
void read_int(TrainOptions& o, const std::string& t) { o.*F = parse_number<std::decay_t<decltype(o.*F)>>(t); }
template <auto F>
std::string write_int(const TrainOptions& o) { return std::to_string(o.*F); }
template <auto F>
void read_real(TrainOptions& o, const std::string& t) { o.*F = parse_number<double>(t); }
template <auto F>
std::string write_real(const TrainOptions& o) { return number_text(o.*F); }

// At least `low`: "must be >= low, got N".
template <auto F, int Low>
void read_int_at_least(TrainOptions& o, const std::string& t) {
  read_int<F>(o, t);
  if (o.*F < Low) throw OptionError("must be >= " + std::to_string(Low) + ", got " + t);
}

std::string write_data(const TrainOptions& o) { return o.data.empty() ? "synthetic" : o.data; }

void read_img_size(TrainOptions& o, const std::string& t) {
  read_int<&TrainOptions::img_size>(o, t);
  if (o.img_size < 32) throw OptionError("must be >= 32, got " + t);
  if (o.img_size > kMaxImageSize)
    throw OptionError(t + " is above the limit of " + std::to_string(kMaxImageSize) + " pixels a side");
}

void read_cache(TrainOptions& o, const std::string& t) { o.cache = parse_cache_mode(t); }
std::string write_cache(const TrainOptions& o) { return cache_mode_name(o.cache); }

void read_optimizer(TrainOptions& o, const std::string& t) {
  for (OptimizerKind k : {OptimizerKind::SGD, OptimizerKind::Adam, OptimizerKind::AdamW})
    if (t == optimizer_kind_name(k)) {
      o.optimizer = k;
      return;
    }
  throw OptionError("must be SGD, Adam or AdamW, got '" + t + "'");
}
std::string write_optimizer(const TrainOptions& o) { return optimizer_kind_name(o.optimizer); }

void read_label_smoothing(TrainOptions& o, const std::string& t) {
  read_real<&TrainOptions::label_smoothing>(o, t);
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) throw OptionError("must be in [0, 1), got " + t);
}

void read_freeze(TrainOptions& o, const std::string& t) { o.freeze = parse_int_list(t); }
std::string write_freeze(const TrainOptions& o) { return int_list_text(o.freeze); }

void read_amp(TrainOptions& o, const std::string& t) { o.amp = parse_amp_mode(t); }
std::string write_amp(const TrainOptions& o) { return amp_mode_name(o.amp); }

void read_bucket_cap(TrainOptions& o, const std::string& t) {
  read_real<&TrainOptions::bucket_cap_mb>(o, t);
  if (!(o.bucket_cap_mb > 0)) throw OptionError("must be positive, got " + t);
}

void read_edge_bucket(TrainOptions& o, const std::string& t) {
  read_real<&TrainOptions::edge_bucket_mb>(o, t);
  if (!(o.edge_bucket_mb >= 0)) throw OptionError("must be >= 0 (0 turns edge buckets off), got " + t);
}

void read_grad_compress(TrainOptions& o, const std::string& t) {
  const std::optional<dist::GradCompress> c = dist::parse_grad_compress(t);
  if (!c) throw OptionError("must be none, fp16 or bf16, got '" + t + "'");
  o.grad_compress = *c;
}
std::string write_grad_compress(const TrainOptions& o) { return dist::grad_compress_name(o.grad_compress); }

void read_cuda_graph(TrainOptions& o, const std::string& t) { o.cuda_graph = parse_cuda_graph_mode(t); }
void read_tf32(TrainOptions& o, const std::string& t) {
  if (t != "on" && t != "off" && t != "True" && t != "False")
    throw OptionError("must be on or off, got " + t);
  o.tf32 = t == "on" || t == "True";
}
std::string write_tf32(const TrainOptions& o) { return o.tf32 ? "on" : "off"; }
std::string write_cuda_graph(const TrainOptions& o) { return cuda_graph_mode_name(o.cuda_graph); }

void read_phase_timeout(TrainOptions& o, const std::string& t) {
  read_real<&TrainOptions::dist_phase_timeout>(o, t);
  if (!(o.dist_phase_timeout > 0)) throw OptionError("must be positive, got " + t);
}

// "null" (opt.yaml's None: no evolution) or a generation count.
void read_evolve(TrainOptions& o, const std::string& t) {
  if (t == "null") {
    o.evolve = 0;
    return;
  }
  read_int<&TrainOptions::evolve>(o, t);
  if (o.evolve < 1) throw OptionError("N needs N >= 1 generations, got " + t);
}
std::string write_evolve(const TrainOptions& o) { return o.evolve > 0 ? std::to_string(o.evolve) : "null"; }

// Rows of the table.
template <auto F>
TrainOptionSpec text_row(const char* flag, const char* key, const char* value, const char* help,
                         const char* fallback = nullptr) {
  return {flag, key, value, help, read_text<F>, write_text<F>, fallback};
}
template <auto F>
TrainOptionSpec switch_row(const char* flag, const char* key, const char* help) {
  return {flag, key, nullptr, help, read_switch<F>, write_switch<F>};
}
template <auto F>
TrainOptionSpec int_row(const char* flag, const char* key, const char* value, const char* help) {
  return {flag, key, value, help, read_int<F>, write_int<F>};
}
template <auto F>
TrainOptionSpec real_row(const char* flag, const char* key, const char* value, const char* help) {
  return {flag, key, value, help, read_real<F>, write_real<F>};
}
// A flag of the command's own, with no field here (it reads it from its arguments).
TrainOptionSpec command_row(const char* flag, const char* value, const char* fallback, const char* help) {
  return {flag, nullptr, value, help, nullptr, nullptr, fallback};
}

using O = TrainOptions;

}  // namespace

const std::vector<TrainOptionSpec>& train_option_specs() {
  static const std::vector<TrainOptionSpec> specs = {
      // The reference's train.py flags, in its order.
      text_row<&O::weights>("weights", "weights", "W.pt", "initial weights: a YOLOv5 .pt or a Kestrel .safetensors; empty: from scratch"),
      text_row<&O::cfg>("cfg", "cfg", "M.yaml", "model yaml; without it, --weights brings its own model"),
      {"data", "data", "D.yaml", "dataset yaml (coco128.yaml, ... by name), or the built-in synthetic set", read_text<&O::data>, write_data},
      text_row<&O::hyp>("hyp", "hyp", "H.yaml", "hyperparameters yaml (hyp.scratch-low.yaml, ... by name)", "hyp.scratch-low.yaml"),
      {"epochs", "epochs", "N", "total training epochs", read_int_at_least<&O::epochs, 1>, write_int<&O::epochs>},
      {"batch-size", "batch_size", "N", "total batch size over all ranks (each rank gets batch/world)",
       read_int_at_least<&O::batch_size, 1>, write_int<&O::batch_size>},
      {"img-size", "imgsz", "PIXELS", "train and val image size (also --img, --imgsz)", read_img_size, write_int<&O::img_size>},
      switch_row<&O::rect>("rect", "rect", "rectangular training batches"),
      command_row("resume", nullptr, nullptr, "resume the most recent run (or the checkpoint given as --resume PATH)"),
      command_row("resume-from", "PATH", nullptr, "resume this checkpoint (last.pt or last.safetensors); --resume PATH says the same"),
      switch_row<&O::nosave>("nosave", "nosave", "save only the final checkpoint"),
      switch_row<&O::noval>("noval", "noval", "validate only the final epoch"),
      switch_row<&O::noautoanchor>("noautoanchor", "noautoanchor", "keep the model's anchors (no AutoAnchor check)"),
      switch_row<&O::noplots>("noplots", "noplots", "write no plot files"),
      {"evolve", "evolve", "[N]", "evolve the hyperparameters over N generations (bare: 300)", read_evolve, write_evolve, ""},
      command_row("bucket", "B", "", "Google Cloud bucket: accepted with a note (Kestrel copies nothing to gs://)"),
      {"cache", "cache", "[ram|disk]", "cache decoded images in RAM (bare --cache: ram) or as .npy files beside them",
       read_cache, write_cache},
      switch_row<&O::image_weights>("image-weights", "image_weights", "draw each epoch's images weighted by their classes' (1 - mAP)^2 (one process)"),
      text_row<&O::device>("device", "device", "cpu|0|0,1", "cpu, a GPU index, or a GPU list (one DDP process per GPU); empty: GPU 0 if any"),
      switch_row<&O::multi_scale>("multi-scale", "multi_scale", "vary the image size by +/- 50 % per batch"),
      switch_row<&O::single_cls>("single-cls", "single_cls", "train multi-class data as one class"),
      {"optimizer", "optimizer", "SGD|Adam|AdamW", "optimizer", read_optimizer, write_optimizer},
      switch_row<&O::sync_bn>("sync-bn", "sync_bn", "SyncBatchNorm across DDP ranks"),
      {"workers", "workers", "N", "most data-loader workers per rank", read_int_at_least<&O::workers, 0>, write_int<&O::workers>},
      text_row<&O::project>("project", "project", "DIR", "runs go to project/name"),
      text_row<&O::name>("name", "name", "NAME", "runs go to project/name, numbered (exp2, ...) when it exists"),
      switch_row<&O::exist_ok>("exist-ok", "exist_ok", "reuse an existing project/name instead of numbering a new one"),
      switch_row<&O::quad>("quad", "quad", "quad loader: batches of 4x fewer images at 2x size (loss x4)"),
      switch_row<&O::cos_lr>("cos-lr", "cos_lr", "cosine learning-rate schedule (linear otherwise)"),
      {"label-smoothing", "label_smoothing", "EPS", "label smoothing epsilon", read_label_smoothing, write_real<&O::label_smoothing>, "0.0"},
      int_row<&O::patience>("patience", "patience", "EPOCHS", "stop after this many epochs without improvement"),
      {"freeze", "freeze", "N|i,j,..", "freeze the first N layers, or the layers listed", read_freeze, write_freeze, "0"},
      int_row<&O::save_period>("save-period", "save_period", "EPOCHS", "also save a checkpoint every this many epochs (< 1: never)"),
      int_row<&O::seed>("seed", "seed", "N", "global training seed"),
      command_row("local-rank", "N", "-1", "torch.distributed.launch's argument: accepted; the rank comes from LOCAL_RANK, as in the reference"),
      command_row("entity", "E", nullptr, "W&B entity: accepted with a note (Kestrel logs to results.csv and TensorBoard)"),
      command_row("upload-dataset", "[val]", "False", "W&B dataset upload: accepted with a note (Kestrel uploads nothing)"),
      command_row("bbox-interval", "N", "-1", "W&B box-image interval: accepted with a note (see the batch plots instead)"),
      command_row("artifact-alias", "A", "latest", "W&B dataset artifact version: accepted with a note (--data names the data)"),
      // Kestrel's own.
      switch_row<&O::deterministic>("deterministic", "deterministic",
                                    "deterministic algorithms only, chosen the same way every run (CUDA: cuDNN's "
                                    "deterministic convolutions by its heuristics, never timed; reproducible, slower)"),
      {"tf32", "tf32", "on|off",
       "CUDA float32 convolutions on TF32 tensor cores, as PyTorch's default (cudnn.allow_tf32); "
       "off: float32 FMA math only", read_tf32, write_tf32},
      {"amp", "amp", "bf16|fp16|off|bf16-emulated",
       "mixed precision; default bf16 on sm_80+ GPUs, off on the CPU (bf16 there: bfloat16 convolutions, "
       "needs AVX-512 BF16 or AMX; bf16-emulated: the same numbers in float32, for checking)",
       read_amp, write_amp},
      command_row("nproc-per-node", "N", "1", "start N local DDP worker processes"),
      command_row("nnodes", "N", "1", "number of machines in a multi-node run"),
      command_row("node-rank", "R", "0", "this machine's rank in a multi-node run"),
      command_row("master-addr", "HOST", "127.0.0.1", "address of node 0's rendezvous"),
      command_row("master-port", "PORT", "29500", "port of node 0's rendezvous"),
      {"bucket-cap-mb", "bucket_cap_mb", "MB", "DDP gradient bucket size", read_bucket_cap, write_real<&O::bucket_cap_mb>},
      {"edge-bucket-mb", "edge_bucket_mb", "MB", "DDP's first and last gradient bucket at most this size (0: off)",
       read_edge_bucket, write_real<&O::edge_bucket_mb>},
      switch_row<&O::no_overlap>("no-overlap", "no_overlap", "all-reduce gradients after backward instead of during it"),
      switch_row<&O::timed_buckets>("timed-buckets", "timed_buckets", "DDP on CPUs: cut gradient buckets again after step 2 by measured timing"),
      {"grad-compress", "grad_compress", "none|fp16|bf16", "all-reduce DDP gradients in 16 bits (DDP's fp16/bf16_compress_hook)",
       read_grad_compress, write_grad_compress},
      text_row<&O::trace>("trace", nullptr, "FILE", "write a Chrome trace of each step's compute and communication"),
      real_row<&O::dist_timeout>("dist-timeout", nullptr, "SECONDS", "how long a collective may take before the run fails"),
      {"dist-phase-timeout", nullptr, "SECONDS", "how long ranks wait for rank 0's work alone (caches, validation)",
       read_phase_timeout, write_real<&O::dist_phase_timeout>},
      int_row<&O::max_batches>("max-batches", "max_batches", "N", "stop each epoch after N batches (0: all), for tests and timing"),
      switch_row<&O::check_sync>("check-sync", "check_sync", "compare parameters across ranks every step (debugging)"),
      command_row("max-restarts", "K", "0", "restart all workers when one dies, up to K times, resuming the newest checkpoint"),
      switch_row<&O::no_tensorboard>("no-tensorboard", "no_tensorboard", "write no TensorBoard event file"),
      switch_row<&O::no_pt>("no-pt", "no_pt", "write no best.pt / last.pt (the reference's format, for its val.py, detect.py, "
                                             "export.py and train.py --resume) beside the .safetensors"),
      {"cuda-graph", "cuda_graph", "auto|on|off", "replay each step shape from a CUDA graph (auto: fixed-shape CUDA runs)",
       read_cuda_graph, write_cuda_graph},
  };
  return specs;
}

const std::vector<TrainOptionSpec>& segment_train_option_specs() {
  static const std::vector<TrainOptionSpec> specs = [] {
    std::vector<TrainOptionSpec> out;
    for (const TrainOptionSpec& s : train_option_specs()) {
      const std::string flag = s.flag ? s.flag : "";
      if (flag == "entity" || flag == "upload-dataset" || flag == "bbox-interval" || flag == "artifact-alias")
        continue;  // segment/train.py has no W&B flags
      if (flag == "no-overlap") {  // the masks' flag there; DDP's gets another name
        TrainOptionSpec ddp = s;
        ddp.flag = "no-ddp-overlap";
        ddp.key = "no_ddp_overlap";
        out.push_back(ddp);
        continue;
      }
      out.push_back(s);
      if (flag == "local-rank") {  // segment/train.py's own flags follow it
        out.push_back({"mask-ratio", "mask_ratio", "N", "label masks at 1/N of the input size",
                       read_int_at_least<&O::mask_ratio, 1>, write_int<&O::mask_ratio>});
        out.push_back(switch_row<&O::no_overlap_masks>("no-overlap", "no_overlap",
                                                       "one mask per instance instead of one index image per image"));
      }
    }
    return out;
  }();
  return specs;
}

const std::vector<TrainOptionSpec>& train_option_specs(TrainTaskKind task) {
  return task == TrainTaskKind::Segment ? segment_train_option_specs() : train_option_specs();
}

TrainOptions train_defaults(TrainTaskKind task) {
  TrainOptions o;
  o.task = task;
  if (task == TrainTaskKind::Segment) {
    o.data = "coco128-seg.yaml";
    o.cfg = "models/yolov5s-seg.yaml";
    o.project = "runs/train-seg";
  }
  return o;
}

std::vector<std::pair<std::string, std::string>> TrainOptions::to_pairs() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const TrainOptionSpec& s : train_option_specs(task))
    if (s.key) out.emplace_back(s.key, s.write(*this));
  return out;
}

std::string cache_mode_name(CacheMode mode) {
  return mode == CacheMode::Ram ? "ram" : mode == CacheMode::Disk ? "disk" : "";
}

CacheMode parse_cache_mode(const std::string& text) {
  if (text.empty()) return CacheMode::None;
  if (text == "ram") return CacheMode::Ram;
  if (text == "disk") return CacheMode::Disk;
  throw OptionError("supports ram (images decoded into memory) and disk (decoded images as .npy files beside "
                    "them), got '" + text + "'");
}

std::string amp_mode_name(AmpMode mode) {
  switch (mode) {
    case AmpMode::Auto: return "";
    case AmpMode::Bf16: return "bf16";
    case AmpMode::Fp16: return "fp16";
    case AmpMode::Off: return "off";
    case AmpMode::Bf16Emulated: return "bf16-emulated";
  }
  return "";
}

AmpMode parse_amp_mode(const std::string& text) {
  for (AmpMode m : {AmpMode::Auto, AmpMode::Bf16, AmpMode::Fp16, AmpMode::Off, AmpMode::Bf16Emulated})
    if (text == amp_mode_name(m)) return m;
  throw OptionError("must be bf16, fp16, bf16-emulated or off, got '" + text + "'");
}

std::string cuda_graph_mode_name(CudaGraphMode mode) {
  return mode == CudaGraphMode::On ? "on" : mode == CudaGraphMode::Off ? "off" : "auto";
}

CudaGraphMode parse_cuda_graph_mode(const std::string& text) {
  for (CudaGraphMode m : {CudaGraphMode::Auto, CudaGraphMode::On, CudaGraphMode::Off})
    if (text == cuda_graph_mode_name(m)) return m;
  throw OptionError("must be auto, on or off, got '" + text + "'");
}

json::Value options_json(const TrainOptions& o, const std::string& cfg_text, int nc,
                         const std::vector<std::string>& names) {
  json::Object obj;
  for (const auto& [k, v] : o.to_pairs()) obj.emplace_back(k, v);
  if (o.task == TrainTaskKind::Segment) obj.emplace_back("task", "segment");
  obj.emplace_back("cfg_yaml", cfg_text);
  obj.emplace_back("nc", static_cast<int64_t>(nc));
  json::Array name_list;
  for (const auto& n : names) name_list.emplace_back(n);
  obj.emplace_back("names", name_list);
  return obj;
}

}  // namespace kestrel::yolo
