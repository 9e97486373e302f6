#include "yolo/eval/classify_validator.h"

#include <chrono>
#include <cstdio>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "engine/ops/cross_entropy.h"

namespace kestrel::yolo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

ClassifyValResult validate_classifier(ClassificationModel& model, data::ClassifyLoader& loader, Device device,
                                      const ClassifyValOptions& options, const Console* bar) {
  ClassifyValResult r;
  model.train(false);
  autograd::NoGradGuard no_grad;
  const int64_t n = loader.len();
  double pre = 0, inference = 0, post = 0, loss_sum = 0;
  const Clock::time_point start = Clock::now();
  ProgressCadence cadence = bar ? bar->cadence() : ProgressCadence(false);
  loader.start_epoch(0);
  int64_t done = 0;
  while (std::optional<data::ClassifyBatch> batch = loader.next()) {
    Clock::time_point t = Clock::now();
    Tensor images = batch->images.to(device);
    if (options.compute != DType::F32) images = images.to(options.compute);
    current_stream(device).synchronize();
    pre += seconds_since(t);
    t = Clock::now();
    Tensor logits = model.forward(images);
    current_stream(device).synchronize();
    inference += seconds_since(t);
    t = Clock::now();
    r.metrics.add(logits, batch->labels);
    if (options.label_smoothing) {
      const Tensor labels = Tensor::from_vector(batch->labels, {batch->size()}, device);
      const Tensor loss = ops::cross_entropy(logits.to(DType::F32), labels, *options.label_smoothing);
      loss_sum += loss.item();
    }
    post += seconds_since(t);
    ++done;
    if (bar && cadence.due(done, n, seconds_since(start)))
      bar->progress(str(options.action, ": ", format_bar(done, n, seconds_since(start))), done == n);
  }
  r.top1 = r.metrics.top1();
  r.top5 = r.metrics.top5();
  r.loss = options.label_smoothing && n ? loss_sum / static_cast<double>(n) : 0.0;
  const double per_image = r.metrics.count() ? 1e3 / static_cast<double>(r.metrics.count()) : 0.0;
  r.ms_pre = pre * per_image, r.ms_inference = inference * per_image, r.ms_post = post * per_image;
  return r;
}

std::string classify_speed_line(const ClassifyValResult& r, int img_size) {
  char line[256];
  std::snprintf(line, sizeof line,
                "Speed: %.1fms pre-process, %.1fms inference, %.1fms post-process per image at shape (1, 3, %d, %d)",
                r.ms_pre, r.ms_inference, r.ms_post, img_size, img_size);
  return line;
}

}  // namespace kestrel::yolo
