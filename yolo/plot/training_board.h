// The reference's TensorBoard logging of a training run (utils/loggers/__init__.py), written by
// rank 0 into the run directory (tensorboard --logdir runs/train):
// - every epoch, the results.csv columns under the same tags (train/box_loss ... metrics/mAP_0.5
//   ... x/lr2), step = epoch;
// - the train-batch mosaics (train_batch0..2.jpg) as images when they are drawn (not with
//   --noplots), tag = the file's stem, step = their epoch;
// - when the run ends, the result plots that exist (results.png, confusion_matrix.png, the
//   curves) as images at the last epoch, as the reference's on_train_end.
// A resumed run writes a new file that starts with a SessionLog START at its first epoch, so that
// TensorBoard drops what the interrupted run logged for the epochs it redoes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorboard/event_writer.h"

namespace kestrel::yolo {

class TrainingBoard {
 public:
  TrainingBoard(const std::string& save_dir, std::optional<int64_t> resumed_at_epoch);
  const std::string& path() const { return writer_.path(); }
  // `results`: one row of results.csv, in ResultsCsv::columns() order.
  void log_epoch(int64_t epoch, const std::vector<double>& results);
  // Any task's metrics under their own tags (a classifier's train/loss, metrics/accuracy_top1, ...),
  // as the reference's GenericLogger.log_metrics.
  void log_scalars(int64_t epoch, const std::vector<std::pair<std::string, double>>& metrics);
  // A PNG or JPEG file as an image tagged with its stem.
  void log_image(const std::string& image_path, int64_t step);
  void log_result_plots(int64_t epoch);

 private:
  std::string save_dir_;
  tensorboard::EventWriter writer_;
};

}  // namespace kestrel::yolo
