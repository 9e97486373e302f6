// The reference's classify/val.py run(): the classifier in eval mode over a split's batches
// (centre-cropped), each image's top five classes, top-1 and top-5 accuracy, the mean of the
// batches' losses when a loss is asked for (training's validation), the per-class table and the
// speed line. Called by `kestrel classify val` and after every training epoch (on the EMA).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "yolo/common/console.h"
#include "yolo/data/classify_loader.h"
#include "yolo/eval/classify_metrics.h"
#include "yolo/model/classification_model.h"

namespace kestrel::yolo {

struct ClassifyValOptions {
  // The loss of training's validation: cross-entropy with this label smoothing, averaged over
  // batches as the reference (a batch's mean, summed, over the batch count). Unset: no loss.
  std::optional<double> label_smoothing;
  std::string action = "validating";  // the bar's text: "validating" for val/, "testing" for test/
  DType compute = DType::F32;         // the images' dtype on the device (F16: --half on CUDA)
};

struct ClassifyValResult {
  double top1 = 0, top5 = 0, loss = 0;
  ClassifyMetrics metrics;
  // Milliseconds per image: moving batches to the device, the forward pass, taking the top five.
  double ms_pre = 0, ms_inference = 0, ms_post = 0;
};

// One pass over `loader`'s epoch 0 (batches in order). `bar` (optional) draws the reference's
// progress bar. The model is left in eval mode.
ClassifyValResult validate_classifier(ClassificationModel& model, data::ClassifyLoader& loader, Device device,
                                      const ClassifyValOptions& options, const Console* bar = nullptr);

// val.py's closing lines: "Speed: %.1fms pre-process, ... per image at shape (1, 3, s, s)".
std::string classify_speed_line(const ClassifyValResult& r, int img_size);

}  // namespace kestrel::yolo
