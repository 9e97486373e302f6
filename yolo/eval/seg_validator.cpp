#include "yolo/eval/seg_validator.h"

#include <chrono>
#include <filesystem>
#include <numeric>

#include "engine/autograd.h"
#include "engine/ops/layout.h"
#include "io/json.h"
#include "io/rle.h"
#include "yolo/data/batch_uploader.h"
#include "yolo/eval/coco_eval.h"
#include "yolo/eval/box_ops.h"
#include "yolo/eval/mask_ops.h"
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
  SegmentationStats stats;
  ConfusionMatrix confusion;
  double t_pre = 0, t_inf = 0, t_nms = 0;  // ms, summed
  double box = 0, seg = 0, obj = 0, cls = 0;
  int64_t batches = 0, images = 0;
  json::Array json_rows;
  explicit Accumulated(int nc) : confusion(nc) {}
};

// Phase 1: one batch through the model (and the loss) and NMS with the mask coefficients.
struct BatchPrediction {
  int64_t height = 0, width = 0;   // of the letterboxed batch
  std::vector<Tensor> detections;  // per image (n, 6 + nm), letterbox pixels
  Tensor protos;                   // CPU float32 (bs, mh, mw, nm)
  Tensor masks;                    // the batch's label masks, CPU float32
};

BatchPrediction predict(const SegValidator::SegPredictor& model, const SegValLoss& loss, data::BatchUploader& uploader,
                        const data::SegBatch& batch, const SegValOptions& o, Device device, Accumulated& acc) {
  auto t0 = Clock::now();
  data::Batch plain;
  plain.index = batch.index;
  plain.images = batch.images;
  plain.targets = batch.targets;
  plain.paths = batch.paths;
  plain.shapes = batch.shapes;
  data::DeviceBatch db = uploader.to_device(plain);
  Tensor x = ops::images_to_input(db.images, o.compute_dtype);
  if (device.is_cuda()) sync(device);
  acc.t_pre += ms_since(t0);

  t0 = Clock::now();
  SegmentationModel::Prediction pred = model(x);
  if (device.is_cuda()) sync(device);
  acc.t_inf += ms_since(t0);
  if (loss) {
    const SegValLossItems l = loss(pred.raw, pred.protos, db.targets, batch.masks.to(device));
    acc.box += l.box;
    acc.seg += l.seg;
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
  KESTREL_CHECK(pred.protos.dim() == 4, "segmentation validation: prototypes ", pred.protos.describe(),
                " are not NHWC (batch, h / 4, w / 4, nm)");
  nms.nm = pred.protos.size(3);
  BatchPrediction p{x.size(1), x.size(2), non_max_suppression(pred.boxes, nms), {}, {}};
  acc.t_nms += ms_since(t0);
  p.protos = pred.protos.to(Device::cpu()).to(DType::F32).contiguous();
  p.masks = batch.masks.to(DType::F32).contiguous();
  return p;
}

// The label masks of image si from the batch's masks: its index image with overlap, else its
// labels' rows (in targets order, as the loader writes them).
Tensor image_label_masks(const data::SegBatch& batch, const Tensor& masks, int64_t si, int64_t first_row, int64_t nl) {
  if (batch.overlap) return masks.slice(0, si, si + 1);
  return masks.slice(0, first_row, first_row + nl);
}

// One image's result: its detections (6 columns) in original pixels and its masks on the grid
// they were made on (undefined when there are none).
struct ImageResult {
  Tensor predn;
  Tensor masks;  // uint8 (n, h, w)
};

// Phase 2: one image's detections and masks against its labels.
ImageResult match(const BatchPrediction& p, const data::SegBatch& batch, const std::vector<LabelBox>& labels,
                  int64_t si, int64_t first_row, const SegValOptions& o, Accumulated& acc) {
  std::vector<float> label_classes, corners;
  for (const LabelBox& l : labels) {
    if (l.image != si) continue;
    label_classes.push_back(o.single_cls ? 0.0f : l.cls);
    corners.insert(corners.end(), {l.x1, l.y1, l.x2, l.y2});
  }
  const auto nl = static_cast<int64_t>(label_classes.size());
  ++acc.images;
  Tensor det = p.detections[si];
  if (det.size(0) == 0) {
    if (nl) {
      acc.stats.add({}, {}, det, label_classes);
      acc.confusion.process_labels_only(label_classes);
    }
    return {};
  }
  const ImageSize letterboxed{p.height, p.width};
  const int64_t nm = det.size(1) - 6;
  const Tensor protos = p.protos.slice(0, si, si + 1).reshape({p.protos.size(1), p.protos.size(2), nm});
  const Tensor coefficients = det.slice(1, 6, 6 + nm).contiguous();
  const Tensor boxes = det.slice(1, 0, 4).contiguous();
  // The reference's `process`: process_mask_upsample with --save-json, else process_mask.
  const Tensor pred_masks = o.save_json ? process_mask_upsample(protos, coefficients, boxes, letterboxed)
                                        : process_mask(protos, coefficients, boxes, letterboxed);
  if (o.single_cls) det.slice(1, 5, 6).fill_(0.0);

  const auto& shapes = batch.shapes[si];
  KESTREL_CHECK(shapes.has_value(), "validation sample without letterbox shapes: ", batch.paths[si]);
  const ImageSize original{shapes->h0, shapes->w0};
  const RatioPad rp{shapes->ratio_h, shapes->pad_w, shapes->pad_h};
  Tensor predn = det.slice(1, 0, 6).contiguous().clone();
  scale_boxes(predn, letterboxed, original, rp);
  std::vector<CorrectRow> correct_boxes(det.size(0)), correct_masks(det.size(0));
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
    const Tensor gt = label_masks(image_label_masks(batch, p.masks, si, first_row, nl), nl, batch.overlap,
                                  {pred_masks.size(1), pred_masks.size(2)});
    correct_boxes = match_predictions(predn, labelsn);
    correct_masks = match_masks(predn, labelsn, pred_masks, gt);
    acc.confusion.process_batch(predn, labelsn);
  }
  acc.stats.add(correct_boxes, correct_masks, det, label_classes);
  return {predn, pred_masks};
}

// The image's json rows with their masks: the input-sized masks with the letterbox cut off and
// resized to the original image (scale_image), each as COCO's compressed RLE.
void add_json_rows(const ImageResult& r, const data::SegBatch& batch, int64_t si, bool coco_ids, json::Array& rows) {
  const data::SampleShapes& s = *batch.shapes[si];
  const Tensor masks = scale_masks_to_original(r.masks, {s.h0, s.w0}, RatioPad{s.ratio_h, s.pad_w, s.pad_h});
  std::vector<json::Object> objects = detection_json_rows(r.predn.to_vector<float>(), 6, batch.paths[si], coco_ids);
  const int64_t h = masks.size(1), w = masks.size(2);
  const uint8_t* m = masks.data<uint8_t>();
  for (size_t k = 0; k < objects.size(); ++k) {
    const rle::Rle encoded = rle::encode(m + static_cast<int64_t>(k) * h * w, h, w);
    json::Array size;
    size.emplace_back(h);
    size.emplace_back(w);
    objects[k].emplace_back("segmentation",
                            json::Object{{"size", std::move(size)}, {"counts", rle::to_string(encoded.counts)}});
    rows.emplace_back(std::move(objects[k]));
  }
}

std::string format_table(const SegValResult& r, const SegValOptions& o, const std::vector<std::string>& names,
                         int nc, bool console_has_header) {
  std::string table = console_has_header ? "" : seg_metrics_header() + "\n";
  const bool per_class = per_class_rows(o.verbose, o.training, nc);
  std::vector<std::string> lines = seg_metrics_table(r.metrics, r.images, names, per_class);
  table += lines.front() + "\n";
  if (r.instances == 0)
    table += "WARNING: no labels found in the validation set, can not compute metrics without labels\n";
  for (size_t i = 1; i < lines.size(); ++i) table += lines[i] + "\n";
  if (!o.training) table += speed_line(r.ms_pre, r.ms_inf, r.ms_nms, o.batch_size, o.img_size);
  return table;
}

// The batch plots' masks: per image, its label masks as 0/1 planes on the loader's grid.
std::vector<PlotMask> label_plot_masks(const data::SegBatch& batch, const Tensor& masks,
                                       const std::vector<LabelBox>& labels) {
  std::vector<PlotMask> out;
  int64_t row = 0;
  std::vector<int64_t> seen(batch.size(), 0);
  for (const LabelBox& l : labels) {
    const int64_t k = seen[l.image]++;
    const Tensor plane = batch.overlap ? masks.slice(0, l.image, l.image + 1) : masks.slice(0, row, row + 1);
    const float value = batch.overlap ? static_cast<float>(k + 1) : 1.0f;
    out.push_back({l.image, static_cast<int>(l.cls), mask_plane(plane, value)});
    ++row;
  }
  return out;
}

// The reference's pycocotools step of segment/val.py: COCOeval 'bbox' then 'segm' on the same
// results, each summary after its annotation type's line (as pycocotools prints them); AP@[.5:.95]
// and AP50 of each into the box and mask metrics. The summaries, or why they could not run.
std::string coco_evaluate(const json::Array& rows, const std::vector<data::ImageRecord>& records,
                          const std::vector<std::string>& names, const SegValOptions& o, SegValMetrics& metrics) {
  std::string text = "\nEvaluating COCO mAP (pycocotools' COCOeval, bbox and segm) on " + std::to_string(rows.size()) +
                     " detections against " + (o.coco_gt.empty() ? std::string("the labels") : o.coco_gt) + "...\n";
  try {
    const std::vector<CocoDetection> detections = parse_coco_detections(json::Value(rows), "predictions");
    CocoEvalOptions options;
    const CocoGroundTruth gt = coco_eval_ground_truth(records, names, o.coco_gt, o.coco_ids, o.single_cls, options);
    CocoStats stats[2];
    for (CocoIouType type : {CocoIouType::bbox, CocoIouType::segm}) {
      options.iou_type = type;
      stats[type == CocoIouType::segm] = evaluate_coco(gt, detections, options).stats;
    }
    for (CocoIouType type : {CocoIouType::bbox, CocoIouType::segm})
      text += std::string("Evaluate annotation type *") + coco_iou_type_name(type) + "*\n" +
              coco_summary(stats[type == CocoIouType::segm]);
    metrics.box.map = stats[0][0];
    metrics.box.map50 = stats[0][1];
    metrics.mask.map = stats[1][0];
    metrics.mask.map50 = stats[1][1];
    return text;
  } catch (const std::exception& e) {
    return text + "WARNING: COCO evaluation unable to run: " + e.what() + "\n";
  }
}

}  // namespace

SegValidator::SegValidator(std::vector<data::ImageRecord> records, std::vector<std::string> names, int nc,
                           const SegValOptions& options, Device device, int stride)
    : names_(std::move(names)), nc_(nc), options_(options), device_(device) {
  KESTREL_CHECK(options.mask_ratio >= 1, "segmentation validation: mask ratio ", options.mask_ratio,
                " must be at least 1");
  data::PipelineOptions p;
  p.img_size = options.img_size;
  p.augment = false;
  p.rect = options.rect;
  p.batch_size = options.batch_size;
  p.stride = stride;
  p.pad = 0.5;
  data::SegMaskOptions masks;
  masks.downsample_ratio = options.mask_ratio;
  masks.overlap = options.overlap;
  auto pipeline = std::make_shared<data::SegAugmentPipeline>(std::move(records), p, masks);
  cache_line_ = data::cache_dataset_images(pipeline->images(), options.cache, std::max(1, options.workers));
  pipeline_ = pipeline;
  data::LoaderOptions lo;
  lo.batch_size = options.batch_size;
  lo.workers = options.workers;
  loader_ = std::make_unique<data::SegLoader>(pipeline_, lo, data::sequential_order(pipeline_->size()));
}

SegValResult SegValidator::run(SegmentationModel& model, const SegValLoss& loss) {
  const bool was_training = model.is_training();
  model.train(false);
  SegValResult result = run_batches([&](const Tensor& x) { return model.predict(x); }, loss);
  model.train(was_training);
  return result;
}

SegValResult SegValidator::run(const SegPredictor& predict) { return run_batches(predict, nullptr); }

SegValResult SegValidator::run_batches(const SegPredictor& model, const SegValLoss& loss) {
  const SegValOptions& o = options_;
  KESTREL_CHECK(!o.augment, "segmentation validation has no --augment (the reference's segment/val.py neither)");
  const bool to_files = !o.save_dir.empty();
  if (to_files) std::filesystem::create_directories(o.save_dir);
  if (o.save_txt) std::filesystem::create_directories(o.save_dir + "/labels");
  autograd::NoGradGuard no_grad;
  data::BatchUploader uploader(device_);
  Accumulated acc(nc_);

  loader_->start_epoch(0);
  const int64_t total_batches = loader_->len();
  ProgressCadence cadence = console_ ? console_->cadence() : ProgressCadence(false);
  const auto t_start = Clock::now();
  while (std::optional<data::SegBatch> batch = loader_->next()) {
    const BatchPrediction p = predict(model, loss, uploader, *batch, o, device_, acc);
    const std::vector<LabelBox> labels = label_boxes(batch->targets, p.height, p.width);
    const bool plot_now = o.plots && to_files && batch->index < 3;
    std::vector<PlotBox> plot_boxes;
    std::vector<PlotMask> plot_masks;
    int64_t first_row = 0;
    for (int64_t si = 0; si < batch->size(); ++si) {
      const ImageResult r = match(p, *batch, labels, si, first_row, o, acc);
      for (const LabelBox& l : labels) first_row += l.image == si;
      if (!r.predn.defined()) continue;
      const std::vector<float> d = r.predn.to_vector<float>();
      if (o.save_txt)
        write_detections_txt(d, 6, *batch->shapes[si], o.save_dir + "/labels/" + file_stem(batch->paths[si]) + ".txt",
                             o.save_conf);
      if (o.save_json) add_json_rows(r, *batch, si, o.coco_ids, acc.json_rows);
      if (plot_now) {
        // The reference plots the first 15 detections of each image with their masks.
        const std::vector<float> raw = p.detections[si].to_vector<float>();
        const int64_t cols = p.detections[si].size(1);
        for (int64_t k = 0; k < std::min<int64_t>(15, p.detections[si].size(0)); ++k) {
          const float* row = raw.data() + k * cols;
          plot_boxes.push_back({static_cast<int>(si), static_cast<int>(row[5]), row[0], row[1], row[2], row[3], row[4]});
          plot_masks.push_back({si, static_cast<int>(row[5]), mask_plane(r.masks.slice(0, k, k + 1), 1.0f), row[4]});
        }
      }
    }
    if (plot_now) {
      const std::string prefix = o.save_dir + "/val_batch" + std::to_string(batch->index);
      plot_batch_with_masks(batch->images, batch->paths, target_boxes(batch->targets, p.height, p.width),
                            label_plot_masks(*batch, p.masks, labels), names_, prefix + "_labels.jpg");
      plot_batch_with_masks(batch->images, batch->paths, plot_boxes, plot_masks, names_, prefix + "_pred.jpg");
    }
    ++acc.batches;
    const double seconds = ms_since(t_start) / 1000;
    if (console_ && cadence.due(acc.batches, total_batches, seconds))
      console_->progress(seg_metrics_header() + ": " + format_bar(acc.batches, total_batches, seconds),
                         acc.batches == total_batches);
  }

  SegValResult result;
  result.metrics = acc.stats.compute(nc_);
  result.images = acc.images;
  result.instances = std::accumulate(result.metrics.nt.begin(), result.metrics.nt.end(), int64_t{0});
  if (acc.batches) {
    result.box_loss = acc.box / acc.batches;
    result.seg_loss = acc.seg / acc.batches;
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
    plot_curves(result.metrics.box.details, result.metrics.box.map50, names_, o.save_dir, "Box");
    plot_curves(result.metrics.mask.details, result.metrics.mask.map50, names_, o.save_dir, "Mask");
  }
  if (to_files && o.save_json) write_predictions_json(acc.json_rows, o.save_dir + "/predictions.json");
  if (o.save_json && (o.coco_eval || !o.coco_gt.empty())) {
    if (!acc.json_rows.empty()) {
      std::vector<data::ImageRecord> records;
      for (int64_t i = 0; i < pipeline_->size(); ++i) records.push_back(pipeline_->images().record(i));
      result.table += coco_evaluate(acc.json_rows, records, names_, o, result.metrics);
    } else if (o.coco_eval) {
      result.table += "COCO evaluation skipped: no detections\n";
    }
  }
  return result;
}

}  // namespace kestrel::yolo
