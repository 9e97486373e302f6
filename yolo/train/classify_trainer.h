// The reference's classify/train.py: a classifier (--model: a -cls .pt, a detector cut at --cutoff,
// or a yaml) trained on a folder dataset with its augmentation, cross-entropy with label
// smoothing, the smart_optimizer groups (Adam by default), gradient clipping at norm 10, a linear
// learning rate from lr0 to lr0 * 0.01 stepped per epoch, an EMA validated after every epoch
// (top-1 as fitness), results.csv, train_images.jpg / test_images.jpg and results.png, and
// weights/last and best: while the run lasts Kestrel's full checkpoints (model, EMA, optimizer:
// what --resume continues), at its end stripped to the EMA in float16 as the reference saves them,
// with the model yaml, class names and image size in their options.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/json.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

// classify/train.py's options, its defaults.
struct ClassifyTrainOptions {
  std::string model = "yolov5s-cls.pt";
  std::string data = "imagenette160";
  int epochs = 10;
  int batch_size = 64;
  int imgsz = 224;
  bool nosave = false;
  std::string cache;  // "" (None), "ram", "disk"
  std::string device;
  int workers = 8;
  std::string project = "runs/train-cls";
  std::string name = "exp";
  bool exist_ok = false;
  bool pretrained = true;
  OptimizerKind optimizer = OptimizerKind::Adam;
  double lr0 = 0.001;
  double decay = 5e-5;
  double label_smoothing = 0.1;
  std::optional<int> cutoff;
  std::optional<double> dropout;
  bool verbose = false;
  int seed = 0;
  bool noplots = false;   // Kestrel's: no train_images.jpg, test_images.jpg or results.png
  bool no_tensorboard = false;  // Kestrel's, as train's: no TensorBoard event file
  // Kestrel's --amp, as train's (the reference autocasts to float16 on CUDA, with a GradScaler):
  // Auto is bfloat16 on sm_80+ GPUs (float16 before, scaled), float32 on the CPU.
  AmpMode amp = AmpMode::Auto;
  int max_batches = 0;    // Kestrel's, for tests and benchmarks: batches per epoch (0: all)
  // Kestrel's --resume (the reference's classify/train.py has none): "" the newest
  // weights/last.safetensors under --project, else that checkpoint. The run continues as it was
  // configured (every option from the checkpoint but --device, --workers and --noplots) in its
  // own directory, and ends bitwise where an uninterrupted run ends.
  std::optional<std::string> resume;
  int interrupt_after = 0;  // testing aid: SIGINT after this many batches of this process

  // opt.yaml's pairs, in classify/train.py's order, as Python prints each value.
  std::vector<std::pair<std::string, std::string>> to_pairs(const std::string& save_dir) const;
  // The options back from a checkpoint's pairs (to_pairs, as JSON strings); `path` names the file.
  static ClassifyTrainOptions from_pairs(const json::Value& pairs, const std::string& path);
};

// What the last epoch measured (rank 0).
struct ClassifyTrainResults {
  double train_loss = 0, val_loss = 0, top1 = 0, top5 = 0, best_fitness = 0;
  std::string save_dir;
};

// Runs training; returns the exit status (0). Output goes to stdout. A SIGINT or SIGTERM stops it
// at once with yolo::Interrupted; the last completed epoch's weights/last.safetensors holds
// everything --resume needs (a stopped epoch is trained again).
int train_classifier(const ClassifyTrainOptions& options, ClassifyTrainResults* results = nullptr);

}  // namespace kestrel::yolo
