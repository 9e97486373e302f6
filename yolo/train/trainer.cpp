#include "yolo/train/trainer.h"

#include "yolo/train/trainer_run.h"

namespace kestrel::yolo {

int train(const TrainOptions& options) { return Trainer(options, nullptr).run(); }
int train(const TrainOptions& options, TrainResults* results) { return Trainer(options, results).run(); }

}  // namespace kestrel::yolo
