#include "yolo/eval/validator.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "engine/autograd.h"
#include "engine/ops/layout.h"
#include "io/json.h"
#include "yolo/data/batch_uploader.h"
#include "yolo/eval/augmented_inference.h"
#include "yolo/eval/box_ops.h"
#include "yolo/eval/coco_eval.h"
#include "yolo/eval/nms.h"
#include "yolo/eval/val_outputs.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void sync(Device d) { current_stream(d).synchronize(); }

// What a run accumulates over its batches.
struct Accumulated {
  DetectionStats stats;
  ConfusionMatrix confusion;
  double t_pre = 0, t_inf = 0, t_nms = 0;  // ms, summed
  double box = 0, obj = 0, cls = 0;        // losses, summed over batches
  int64_t batches = 0, images = 0;
  json::Array json_rows;
  explicit Accumulated(int nc) : confusion(nc) {}
};

// Phase 1, predict: one batch uploaded, through the model (and the loss) and NMS, timed as the
// reference times pre-process, inference and NMS.
struct Prediction {
  int64_t height = 0, width = 0;  // of the letterboxed batch
  std::vector<Tensor> detections;  // per image (n, 6): x1, y1, x2, y2, conf, class
};

// The model's outputs for a batch: decoded boxes, and the raw ones where a loss needs them.
using BatchPredictor = std::function<DetectionModel::Prediction(const Tensor& x)>;

Prediction predict(const BatchPredictor& model, const ValLoss& loss, data::BatchUploader& uploader,
                   const data::Batch& batch, const ValOptions& o, Device device, Accumulated& acc) {
  auto t0 = Clock::now();
  data::DeviceBatch db = uploader.to_device(batch);
  Tensor x = ops::images_to_input(db.images, o.compute_dtype);
  if (device.is_cuda()) sync(device);
  acc.t_pre += ms_since(t0);

  t0 = Clock::now();
  DetectionModel::Prediction pred = model(x);
  if (device.is_cuda()) sync(device);
  acc.t_inf += ms_since(t0);
  if (loss) {
    const ValLossItems l = loss(pred.raw, db.targets);
    acc.box += l.box;
    acc.obj += l.obj;
    acc.cls += l.cls;
  }

  t0 = Clock::now();
  NmsOptions nms;
  nms.conf_thres = o.conf_thres;
  nms.iou_thres = o.iou_thres;
  nms.multi_label = true;
  nms.agnostic = o.single_cls;
  nms.max_det = o.max_det;
  Prediction p{x.size(1), x.size(2), non_max_suppression(pred.boxes, nms)};
  acc.t_nms += ms_since(t0);
  return p;
}

// Phase 2, match: one image's detections against its labels, both mapped back to the original
// image's pixels, into the statistics and the confusion matrix. Returns the detections in
// original pixels (undefined when there are none).
Tensor match(Tensor det, const std::vector<LabelBox>& labels, const data::Batch& batch, int64_t si,
             ImageSize letterboxed, bool single_cls, Accumulated& acc) {
  std::vector<float> label_classes, corners;
  for (const LabelBox& l : labels) {
    if (l.image != si) continue;
    label_classes.push_back(single_cls ? 0.0f : l.cls);
    corners.insert(corners.end(), {l.x1, l.y1, l.x2, l.y2});
  }
  const auto nl = static_cast<int64_t>(label_classes.size());
  ++acc.images;
  if (det.size(0) == 0) {
    if (nl) {
      acc.stats.add({}, det, label_classes);
      acc.confusion.process_labels_only(label_classes);
    }
    return Tensor();
  }
  if (single_cls) det.slice(1, 5, 6).fill_(0.0);
  const auto& shapes = batch.shapes[si];
  KESTREL_CHECK(shapes.has_value(), "validation sample without letterbox shapes: ", batch.paths[si]);
  const ImageSize original{shapes->h0, shapes->w0};
  const RatioPad rp{shapes->ratio_h, shapes->pad_w, shapes->pad_h};
  Tensor predn = det.clone();
  scale_boxes(predn, letterboxed, original, rp);
  std::vector<CorrectRow> correct(det.size(0));
  if (nl) {
    Tensor lbox = Tensor::from_vector(corners, {nl, 4});
    scale_boxes(lbox, letterboxed, original, rp);
    const std::vector<float> scaled = lbox.to_vector<float>();
    std::vector<float> rows;  // class, x1, y1, x2, y2
    for (int64_t k = 0; k < nl; ++k) {
      rows.push_back(label_classes[k]);
      rows.insert(rows.end(), scaled.begin() + 4 * k, scaled.begin() + 4 * k + 4);
    }
    const Tensor labelsn = Tensor::from_vector(rows, {nl, 5});
    correct = match_predictions(predn, labelsn);
    acc.confusion.process_batch(predn, labelsn);
  }
  acc.stats.add(correct, det, label_classes);
  return predn;
}

// Phase 3, report: the table and speed line, the curves and confusion matrix, the json file.
std::string format_table(const ValResult& r, const ValOptions& o, const std::vector<std::string>& names,
                         int nc, bool console_has_header) {
  const ValMetrics& m = r.metrics;
  std::string table = (console_has_header ? "" : metrics_header() + "\n") +
                      metrics_row("all", r.images, r.instances, m.mp, m.mr, m.map50, m.map) + "\n";
  if (r.instances == 0)
    table += "WARNING: no labels found in the validation set, can not compute metrics without labels\n";
  if (per_class_rows(o.verbose, o.training, nc)) {
    for (size_t i = 0; i < m.ap_class.size(); ++i) {
      const int c = m.ap_class[i];
      table += metrics_row(class_name(names, c), r.images, m.nt[c], m.p[i], m.r[i], m.ap50[i], m.ap[i]) + "\n";
    }
  }
  if (!o.training) table += speed_line(r.ms_pre, r.ms_inf, r.ms_nms, o.batch_size, o.img_size);
  return table;
}

// The reference's pycocotools step on the run's detections: the summary (or why it could not
// run) for the table; AP@[.5:.95] and AP50 into the metrics.
std::string coco_evaluate(const json::Array& rows, const std::vector<data::ImageRecord>& records,
                          const std::vector<std::string>& names, const ValOptions& o, ValMetrics& metrics) {
  std::string text = "\nEvaluating COCO mAP (pycocotools' COCOeval) on " + std::to_string(rows.size()) + " detections against " +
                     (o.coco_gt.empty() ? std::string("the labels") : o.coco_gt) + "...\n";
  try {
    const std::vector<CocoDetection> detections = parse_coco_detections(json::Value(rows), "predictions");
    CocoEvalOptions options;
    const CocoGroundTruth gt = coco_eval_ground_truth(records, names, o.coco_gt, o.coco_ids, o.single_cls, options);
    const CocoEvalResult r = evaluate_coco(gt, detections, options);
    metrics.map = r.stats[0];
    metrics.map50 = r.stats[1];
    return text + coco_summary(r.stats);
  } catch (const std::exception& e) {
    return text + "WARNING: COCO evaluation unable to run: " + e.what() + "\n";
  }
}

}  // namespace

std::vector<PlotBox> target_boxes(const Tensor& targets, int64_t height, int64_t width) {
  std::vector<PlotBox> out;
  for (const LabelBox& l : label_boxes(targets, height, width))
    out.push_back({static_cast<int>(l.image), static_cast<int>(l.cls), l.x1, l.y1, l.x2, l.y2});
  return out;
}

const std::vector<int>& coco80_to_91() {
  static const std::vector<int> ids = {
      1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
      46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
      67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90};
  return ids;
}

Validator::Validator(std::vector<data::ImageRecord> records, std::vector<std::string> names,
                     int nc, const ValOptions& options, Device device, int stride)
    : names_(std::move(names)), nc_(nc), options_(options), device_(device) {
  data::PipelineOptions p;
  p.img_size = options.img_size;
  p.augment = false;
  p.rect = options.rect;
  p.batch_size = options.batch_size;
  p.stride = stride;
  p.pad = 0.5;
  auto pipeline = std::make_shared<data::AugmentPipeline>(std::move(records), p);
  cache_line_ = data::cache_dataset_images(*pipeline, options.cache, std::max(1, options.workers));
  pipeline_ = pipeline;
  data::LoaderOptions lo;
  lo.batch_size = options.batch_size;
  lo.workers = options.workers;
  loader_ = std::make_unique<data::Loader>(pipeline_, lo, data::sequential_order(pipeline_->size()));
}

ValResult Validator::run(DetectionModel& model, const ValLoss& loss) {
  KESTREL_CHECK(!(loss && options_.augment), "validation losses come from the plain forward, not --augment's");
  const bool was_training = model.is_training();
  model.train(false);
  ValResult result = run_batches(
      [&](const Tensor& x) {
        return options_.augment ? DetectionModel::Prediction{predict_augmented(model, x), {}} : model.predict(x);
      },
      loss);
  model.train(was_training);
  return result;
}

ValResult Validator::run(const BoxPredictor& predict) {
  return run_batches([&](const Tensor& x) { return DetectionModel::Prediction{predict(x), {}}; }, nullptr);
}

ValResult Validator::run_batches(const std::function<DetectionModel::Prediction(const Tensor&)>& model,
                                 const ValLoss& loss) {
  const ValOptions& o = options_;
  const bool to_files = !o.save_dir.empty();
  if (to_files) std::filesystem::create_directories(o.save_dir);
  if (o.save_txt) std::filesystem::create_directories(o.save_dir + "/labels");
  autograd::NoGradGuard no_grad;
  data::BatchUploader uploader(device_);
  Accumulated acc(nc_);

  loader_->start_epoch(0);
  const int64_t total_batches = (pipeline_->size() + o.batch_size - 1) / o.batch_size;
  ProgressCadence cadence = console_ ? console_->cadence() : ProgressCadence(false);
  const auto t_start = Clock::now();
  while (std::optional<data::Batch> batch = loader_->next()) {
    const Prediction p = predict(model, loss, uploader, *batch, o, device_, acc);
    const std::vector<LabelBox> labels = label_boxes(batch->targets, p.height, p.width);
    const bool plot_batch_now = o.plots && batch->index < 3;
    std::vector<PlotBox> plot_predictions;
    for (int64_t si = 0; si < batch->size(); ++si) {
      const Tensor predn = match(p.detections[si], labels, *batch, si, {p.height, p.width}, o.single_cls, acc);
      if (!predn.defined()) continue;
      const std::vector<float> d = predn.to_vector<float>();
      if (o.save_txt)
        write_detections_txt(d, 6, *batch->shapes[si], o.save_dir + "/labels/" + file_stem(batch->paths[si]) + ".txt",
                             o.save_conf);
      if (o.save_json)
        for (json::Object& row : detection_json_rows(d, 6, batch->paths[si], o.coco_ids)) acc.json_rows.emplace_back(std::move(row));
      if (plot_batch_now) {
        const std::vector<float> raw = p.detections[si].to_vector<float>();
        for (size_t k = 0; k + 6 <= raw.size(); k += 6)
          plot_predictions.push_back({static_cast<int>(si), static_cast<int>(raw[k + 5]), raw[k], raw[k + 1],
                                      raw[k + 2], raw[k + 3], raw[k + 4]});
      }
    }
    if (plot_batch_now && to_files) {
      const std::string prefix = o.save_dir + "/val_batch" + std::to_string(batch->index);
      plot_batch(batch->images, batch->paths, target_boxes(batch->targets, p.height, p.width), names_, prefix + "_labels.jpg");
      plot_batch(batch->images, batch->paths, plot_predictions, names_, prefix + "_pred.jpg");
    }
    ++acc.batches;
    const double seconds = ms_since(t_start) / 1000;
    if (console_ && cadence.due(acc.batches, total_batches, seconds))
      console_->progress(metrics_header() + ": " + format_bar(acc.batches, total_batches, seconds),
                         acc.batches == total_batches);
  }
  ValResult result;
  result.metrics = acc.stats.compute(nc_);
  result.images = acc.images;
  result.instances = std::accumulate(result.metrics.nt.begin(), result.metrics.nt.end(), int64_t{0});
  if (acc.batches) {
    result.box_loss = acc.box / acc.batches;
    result.obj_loss = acc.obj / acc.batches;
    result.cls_loss = acc.cls / acc.batches;
  }
  const double n = std::max<int64_t>(acc.images, 1);
  result.ms_pre = acc.t_pre / n;
  result.ms_inf = acc.t_inf / n;
  result.ms_nms = acc.t_nms / n;
  result.table = format_table(result, o, names_, nc_, console_ != nullptr);
  if (to_files && o.plots) {
    plot_confusion(acc.confusion, names_, nc_, o.save_dir);
    plot_curves(result.metrics.details, result.metrics.map50, names_, o.save_dir);
  }
  if (to_files && o.save_json) write_predictions_json(acc.json_rows, o.save_dir + "/predictions.json");
  if (o.save_json && (o.coco_eval || !o.coco_gt.empty())) {
    if (!acc.json_rows.empty()) {
      std::vector<data::ImageRecord> records;
      for (int64_t i = 0; i < pipeline_->size(); ++i) records.push_back(pipeline_->record(i));
      result.table += coco_evaluate(acc.json_rows, records, names_, o, result.metrics);
    } else if (o.coco_eval) {
      result.table += "COCO evaluation skipped: no detections\n";
    }
  }
  return result;
}

}  // namespace kestrel::yolo
