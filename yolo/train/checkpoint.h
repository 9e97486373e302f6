// Training checkpoints (last / best) in safetensors: everything a run needs to continue exactly.
//   tensors  "model.<name>"                  the model state (yolo/model/weights.h's names, OIHW convs)
//            "ema.<name>"                    the EMA's state
//            "optimizer.<param name>.<slot>" momentum_buffer, or exp_avg / exp_avg_sq / step
//   metadata "format"      "kestrel.checkpoint.v1"
//            "epoch", "best_fitness", "ema_updates"
//            "hyp"         JSON object of every hyperparameter (as the run used them)
//            "options"     JSON value given by the trainer (its command-line options)
//            "optimizer"   JSON: kind and per group label, lr, initial_lr, momentum, weight_decay
//            "schedule"    JSON: last_epoch, accumulate, last_opt_step
//            "scaler"      JSON: scale, growth_tracker, skipped_steps
//            "generators"  JSON: per named generator seed, stream id and block offset
//            "progress"    JSON given by the trainer: where inside an epoch it stopped, running
//                          loss means, early-stopping state (absent in older files: {})
//   tensors  "grad.<param name>"            gradients accumulated since the last optimizer step
//                                           (only when the caller passes them: see below)
// A stripped checkpoint (strip_checkpoint, the end of a finished run) holds only "model.<name>":
// the EMA's weights in float16, and the metadata above less optimizer, schedule, scaler,
// ema_updates and progress, plus "stripped": "true".
// Everything is stored at full precision (float32 tensors, shortest round-trip decimals), unlike
// the reference's float16 copies, so that a run resumed on the CPU ends bitwise where an
// uninterrupted one does. The file is written to a temporary name and renamed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/random.h"
#include "engine/safetensors_tensors.h"
#include "io/json.h"
#include "layers/module.h"
#include "yolo/common/hyp.h"
#include "yolo/train/ema.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/schedule.h"

namespace kestrel::yolo {

// A Generator's position. Restoring continues at the next whole block of 4 values (the Generator
// cannot resume inside a block partly read by host draws), so for bitwise resumption a trainer
// saves generators it has used only through whole-block fills, or derives them per epoch.
struct GeneratorState {
  std::string name;
  uint64_t seed = 0, stream_id = 0, offset = 0;
};
GeneratorState generator_state(const std::string& name, const Generator& g);
Generator restore_generator(const GeneratorState& s);

// The "format" metadata of Kestrel's checkpoints.
inline constexpr const char* kCheckpointFormat = "kestrel.checkpoint.v1";

// A checkpoint file as the functions below read it: Kestrel's safetensors, or a YOLOv5 v7.0
// training checkpoint (.pt) in the same shape (yolo/train/pt_resume.h), told apart by their first bytes.
SafetensorsFile read_checkpoint_file(const std::string& path);

struct CheckpointInfo {
  int64_t epoch = -1;  // the last completed epoch
  double best_fitness = 0;
  Hyp hyp;
  json::Value options = json::Object{};
  std::vector<GeneratorState> generators;
  json::Value progress = json::Object{};
  bool stripped = false;  // EMA weights only, float16: not resumable
};

// What a checkpoint holds besides the info; null members are left out of the file (a stripped
// checkpoint has no optimizer) or, when loading, are not restored.
struct TrainingObjects {
  layers::Module* model = nullptr;  // required
  ModelEma* ema = nullptr;
  Optimizer* optimizer = nullptr;
  LrSchedule* schedule = nullptr;
  GradScaler* scaler = nullptr;
};

// Parameters whose .grad holds an accumulation not yet stepped (gradient accumulation spans
// epochs in the reference). Saving writes each defined .grad; loading copies the file's into
// .grad (in place where defined) and leaves a parameter alone when the file has none for it.
using PendingGradients = std::vector<std::pair<std::string, Tensor>>;

void save_checkpoint(const std::string& path, const TrainingObjects& objects,
                     const CheckpointInfo& info, const PendingGradients& gradients = {});

// The info alone (for --resume: the options and hyp come before the model is built).
CheckpointInfo read_checkpoint_info(const std::string& path);

// Throws, naming `path`, when `info` is a stripped checkpoint's: a finished run's weights serve
// val, detect and train --weights, but hold nothing to resume from.
void check_resumable(const CheckpointInfo& info, const std::string& path);

// Restores every non-null object from the file; each must be built as at save time (same model
// yaml, optimizer kind and groups). A part the caller asks for but the file lacks is an error, and
// so is a stripped file.
CheckpointInfo load_checkpoint(const std::string& path, const TrainingObjects& objects,
                               const PendingGradients& gradients = {});

// As the reference's strip_optimizer when a run ends: rewrites `path` (atomically) keeping the
// EMA's weights (the model's where the file has no EMA) as "model.<name>" in float16 (a tensor
// whose values float16 cannot hold stays float32; integer buffers keep their type), dropping the
// optimizer, pending gradients and resume state. Returns the new file's size in bytes.
uint64_t strip_checkpoint(const std::string& path);

}  // namespace kestrel::yolo
