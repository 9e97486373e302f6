// Where a training run stands, as the console shows it and as a checkpoint carries it: the
// current epoch's running loss means and batch position (an interrupted epoch continues from
// them on --resume), NaN-skip counts, the early stopper, whether gradients are accumulated
// but not yet stepped (and whether their window already holds a non-finite loss), and which
// train images the run was on.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/reducer.h"
#include "io/json.h"
#include "yolo/common/console.h"
#include "yolo/data/dataset_fingerprint.h"
#include "yolo/train/early_stopping.h"

namespace kestrel::yolo {

struct EpochProgress {
  int64_t next_batch = 0;          // batches of the epoch done
  // Running means of the loss items: box, obj, cls (detection), or box, seg, obj, cls
  // (segmentation, items = 4).
  double mloss[4] = {0, 0, 0, 0};
  int items = 3;
  int64_t seen = 0, skipped = 0;   // batches counted; batches skipped for a NaN/Inf loss
  void add(double box, double obj, double cls);
  void add(const double* values);  // `items` values, in mloss' order
};

struct RunProgress {
  EpochProgress epoch;
  int64_t nan_steps = 0;  // over the whole run
  EarlyStopping::State stopper;
  bool accumulated = false;
  // The accumulated gradients' window holds a non-finite loss: its optimizer step is skipped.
  bool window_nonfinite = false;
  // The train images the run was on (absent in checkpoints written before it was recorded).
  std::optional<DatasetFingerprint> dataset;
  // --image-weights: the last validation's per class mAP50-95, which the next epochs' draws are
  // weighted by (empty before any validation, or without --image-weights).
  std::vector<double> class_maps;
  // A data-parallel run's settled gradient bucket layout (dist/reducer.h), which a resumed run
  // adopts (absent for one rank, before the layout settles, and in older checkpoints).
  std::optional<dist::Reducer::SettledLayout> bucket_layout;
  json::Value to_json() const;
  // An empty object (a checkpoint from before this existed) gives an epoch-boundary state.
  static RunProgress from_json(const json::Value& v, const std::string& path);
};

// The reference's epoch line: ('%11s' * 2 + '%11.4g' * 5) % (epoch/epochs-1, GPU memory,
// the three mean losses, instances, size) (segment/train.py's: '%11.4g' * 6, four losses), then
// ": " and the bar, e.g.
// "       3/99     0.512G     0.1034    0.06011    0.02433         57        640:  40%|████      | 12/30 00:05<00:07"
std::string progress_line(int epoch, int epochs, double mem_gb, const EpochProgress& p,
                          int64_t instances, int64_t size, int64_t done, int64_t total, double seconds);
// The header above the epoch lines: '%11s' of Epoch, GPU_mem, the loss names, Instances and Size.
std::string progress_header(const std::vector<std::string>& loss_names);

}  // namespace kestrel::yolo
