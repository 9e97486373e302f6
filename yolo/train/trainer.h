// The training loop of the reference's train.py: data, model, optimizer groups, warmup and
// one-cycle schedule, EMA, AMP, accumulation, per-epoch validation on the EMA, checkpoints
// (stripped to the EMA in float16 when the run ends), results.csv, TensorBoard events and plots,
// early stopping, resume, and data-parallel training (Reducer, SyncBN,
// rank-0-only logging and checkpoints) when the process is one rank of several.
#pragma once
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

// Runs training; returns the process exit status: 0 when every epoch ran (or early stopping
// ended the run), 128 + the signal's number when SIGINT or SIGTERM interrupted it (130, 143);
// the run can then be continued with --resume. Output (rank 0 only) goes to stdout.
int train(const TrainOptions& options);

// The final validation of a run, as the reference's train() returns it: precision, recall, mAP50,
// mAP50-95 and the validation box, objectness and class losses.
struct TrainResults {
  double precision = 0, recall = 0, map50 = 0, map = 0;  // boxes'
  double box_loss = 0, obj_loss = 0, cls_loss = 0;
  // A segmentation run's: the masks' P, R, mAP50, mAP50-95 and the seg loss.
  bool segment = false;
  double mask_precision = 0, mask_recall = 0, mask_map50 = 0, mask_map = 0, seg_loss = 0;
};
// As train(), filling *results (rank 0) from the last validation when the run ends.
int train(const TrainOptions& options, TrainResults* results);

}  // namespace kestrel::yolo
