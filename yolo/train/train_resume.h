// --resume: which checkpoint, and the options the resumed run uses. As the reference, the run
// continues as it was configured: every option that shapes the training comes from the
// checkpoint. Only what cannot change the result may differ (device, dataloader workers, the
// distributed plumbing and diagnostics); the run directory is the checkpoint's own. Whatever the
// command line asked that the checkpoint overrides, or changed where it may, is listed in `notes`
// for the console.
#pragma once
#include <string>
#include <vector>

#include "io/json.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

// The most recently written weights/last.safetensors under `project` ("" when there is none).
std::string latest_checkpoint(const std::string& project);

// The run's options, parsed back from a checkpoint's "options" metadata (TrainOptions::to_pairs);
// keys an older file lacks keep their defaults. The task is the file's ("task": "segment", else
// detection), and so is the option table read.
TrainOptions options_from_json(const json::Value& options, const std::string& path);

struct ResumePlan {
  std::string path;          // the checkpoint
  std::string save_dir;      // its run directory (the parent of weights/)
  CheckpointInfo info;
  TrainOptions options;      // what the resumed run uses
  std::vector<std::string> notes;
};

// requested.resume must be set ("" = the newest last.safetensors under requested.project).
ResumePlan plan_resume(const TrainOptions& requested);

}  // namespace kestrel::yolo
