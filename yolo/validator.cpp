#include "yolo/validator.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "engine/autograd.h"
#include "engine/ops/layout.h"
#include "yolo/box_ops.h"
#include "yolo/data/batch_uploader.h"
#include "yolo/nms.h"
#include "yolo/plots.h"

namespace kestrel::yolo {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void sync(Device d) { current_stream(d).synchronize(); }

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

}  // namespace

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
  p.rect = true;
  p.batch_size = options.batch_size;
  p.stride = stride;
  p.pad = 0.5;
  pipeline_ = std::make_shared<data::AugmentPipeline>(std::move(records), p);
  data::LoaderOptions lo;
  lo.batch_size = options.batch_size;
  lo.workers = options.workers;
  loader_ = std::make_unique<data::Loader>(pipeline_, lo, data::sequential_order(pipeline_->size()));
}

ValResult Validator::run(DetectionModel& model, ComputeLoss* loss) {
  const bool was_training = model.is_training();
  model.train(false);
  autograd::NoGradGuard no_grad;
  data::BatchUploader uploader(device_);
  DetectionStats stats;
  ConfusionMatrix confusion(nc_);
  ValResult result;
  double t_pre = 0, t_inf = 0, t_nms = 0;
  double box = 0, obj = 0, cls = 0;
  int64_t batches = 0;
  std::vector<std::string> json_rows;
  if (!options_.save_dir.empty()) std::filesystem::create_directories(options_.save_dir);
  if (options_.save_txt) std::filesystem::create_directories(options_.save_dir + "/labels");

  loader_->start_epoch(0);
  const int64_t total_batches = (pipeline_->size() + options_.batch_size - 1) / options_.batch_size;
  ProgressCadence cadence = console_ ? console_->cadence() : ProgressCadence(false);
  const auto t_start = Clock::now();
  while (std::optional<data::Batch> batch = loader_->next()) {
    auto t0 = Clock::now();
    data::DeviceBatch db = uploader.to_device(*batch);
    Tensor x = ops::images_to_input(db.images, options_.compute_dtype);
    if (device_.is_cuda()) sync(device_);
    t_pre += ms_since(t0);

    t0 = Clock::now();
    DetectionModel::Prediction pred = model.predict(x);
    if (device_.is_cuda()) sync(device_);
    t_inf += ms_since(t0);
    if (loss) {
      LossResult l = (*loss)(pred.raw, db.targets);
      box += l.box;
      obj += l.obj;
      cls += l.cls;
    }

    t0 = Clock::now();
    NmsOptions nms;
    nms.conf_thres = options_.conf_thres;
    nms.iou_thres = options_.iou_thres;
    nms.multi_label = true;
    nms.agnostic = options_.single_cls;
    nms.max_det = options_.max_det;
    std::vector<Tensor> dets = non_max_suppression(pred.boxes, nms);
    t_nms += ms_since(t0);

    const int64_t H = x.size(1), W = x.size(2);
    const std::vector<float> targets = batch->targets.to(Device::cpu()).to_vector<float>();
    std::vector<PlotBox> pred_boxes;
    for (int64_t si = 0; si < batch->size(); ++si) {
      // Labels of this image in letterboxed pixels (class, x1, y1, x2, y2).
      std::vector<float> label_rows, label_classes;
      for (size_t k = 0; k + 6 <= targets.size(); k += 6) {
        if (static_cast<int64_t>(targets[k]) != si) continue;
        const float c = options_.single_cls ? 0.0f : targets[k + 1];
        const float cx = targets[k + 2] * W, cy = targets[k + 3] * H;
        const float w = targets[k + 4] * W, h = targets[k + 5] * H;
        label_rows.insert(label_rows.end(), {c, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2});
        label_classes.push_back(c);
      }
      const auto nl = static_cast<int64_t>(label_classes.size());
      Tensor det = dets[si];
      ++result.images;
      if (det.size(0) == 0) {
        if (nl) stats.add({}, det, label_classes);
        if (nl) confusion.process_labels_only(label_classes);
        continue;
      }
      if (options_.single_cls) det.slice(1, 5, 6).fill_(0.0);
      Tensor predn = det.clone();
      const auto& shapes = batch->shapes[si];
      KESTREL_CHECK(shapes.has_value(), "validation sample without letterbox shapes: ",
                    batch->paths[si]);
      const ImageSize letterboxed{H, W}, original{shapes->h0, shapes->w0};
      const RatioPad rp{shapes->ratio_h, shapes->pad_w, shapes->pad_h};
      scale_boxes(predn, letterboxed, original, rp);
      // Labels (class, x1, y1, x2, y2) in original-image pixels.
      std::vector<float> corners;
      for (int64_t k = 0; k < nl; ++k) corners.insert(corners.end(), label_rows.begin() + 5 * k + 1, label_rows.begin() + 5 * k + 5);
      Tensor lbox = Tensor::from_vector(corners, {nl, 4});
      if (nl) scale_boxes(lbox, letterboxed, original, rp);
      const std::vector<float> scaled = lbox.to_vector<float>();
      for (int64_t k = 0; k < nl; ++k) std::copy(scaled.begin() + 4 * k, scaled.begin() + 4 * k + 4, label_rows.begin() + 5 * k + 1);
      Tensor labelsn = Tensor::from_vector(label_rows, {nl, 5});
      std::vector<CorrectRow> correct =
          nl ? match_predictions(predn, labelsn) : std::vector<CorrectRow>(det.size(0));
      if (nl) confusion.process_batch(predn, labelsn);
      stats.add(correct, det, label_classes);

      const std::vector<float> d = predn.to_vector<float>();
      if (options_.save_txt) {
        std::ofstream txt(options_.save_dir + "/labels/" + stem(batch->paths[si]) + ".txt");
        for (size_t k = 0; k + 6 <= d.size(); k += 6) {
          const double gw = shapes->w0, gh = shapes->h0;
          txt << static_cast<int>(d[k + 5]) << " " << (d[k] + d[k + 2]) / 2 / gw << " "
              << (d[k + 1] + d[k + 3]) / 2 / gh << " " << (d[k + 2] - d[k]) / gw << " "
              << (d[k + 3] - d[k + 1]) / gh;
          if (options_.save_conf) txt << " " << d[k + 4];
          txt << "\n";
        }
      }
      if (options_.save_json) {
        const std::string s = stem(batch->paths[si]);
        const bool numeric = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        for (size_t k = 0; k + 6 <= d.size(); k += 6) {
          const int c = static_cast<int>(d[k + 5]);
          const int category = options_.coco_ids && c < 80 ? coco80_to_91()[c] : c;
          char row[256];
          std::snprintf(row, sizeof row,
                        "{\"image_id\": %s%s%s, \"category_id\": %d, \"bbox\": [%.3f, %.3f, %.3f, "
                        "%.3f], \"score\": %.5f}",
                        numeric ? "" : "\"", numeric ? std::to_string(std::stoll(s)).c_str() : s.c_str(),
                        numeric ? "" : "\"", category, d[k], d[k + 1], d[k + 2] - d[k],
                        d[k + 3] - d[k + 1], d[k + 4]);
          json_rows.push_back(row);
        }
      }
      if (options_.plots && batch->index < 3) {
        const std::vector<float> raw = det.to_vector<float>();
        for (size_t k = 0; k + 6 <= raw.size(); k += 6)
          pred_boxes.push_back({static_cast<int>(si), static_cast<int>(raw[k + 5]), raw[k], raw[k + 1],
                                raw[k + 2], raw[k + 3], raw[k + 4]});
      }
    }
    if (options_.plots && batch->index < 3 && !options_.save_dir.empty()) {
      const std::string prefix = options_.save_dir + "/val_batch" + std::to_string(batch->index);
      plot_batch(batch->images, target_boxes(batch->targets, H, W), names_, prefix + "_labels.jpg");
      plot_batch(batch->images, pred_boxes, names_, prefix + "_pred.jpg");
    }
    ++batches;
    const double seconds = ms_since(t_start) / 1000;
    if (console_ && cadence.due(batches, total_batches, seconds))
      console_->progress(metrics_header() + ": " + format_bar(batches, total_batches, seconds),
                         batches == total_batches);
  }
  model.train(was_training);

  result.metrics = stats.compute(nc_);
  result.instances = std::accumulate(result.metrics.nt.begin(), result.metrics.nt.end(), int64_t{0});
  if (batches) {
    result.box_loss = box / batches;
    result.obj_loss = obj / batches;
    result.cls_loss = cls / batches;
  }
  const double n = std::max<int64_t>(result.images, 1);
  result.ms_pre = t_pre / n;
  result.ms_inf = t_inf / n;
  result.ms_nms = t_nms / n;

  const ValMetrics& m = result.metrics;
  std::string table = (console_ ? "" : metrics_header() + "\n") +
                      metrics_row("all", result.images, result.instances, m.mp, m.mr, m.map50, m.map) + "\n";
  if (result.instances == 0)
    table += "WARNING: no labels found in the validation set, can not compute metrics without labels\n";
  if (per_class_rows(options_.verbose, options_.training, nc_)) {
    for (size_t i = 0; i < m.ap_class.size(); ++i) {
      const int c = m.ap_class[i];
      const std::string name = c < static_cast<int>(names_.size()) ? names_[c] : std::to_string(c);
      table += metrics_row(name, result.images, m.nt[c], m.p[i], m.r[i], m.ap50[i], m.ap[i]) + "\n";
    }
  }
  if (!options_.training) {
    char speed[160];
    std::snprintf(speed, sizeof speed, "Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (%d, 3, %d, %d)\n",
                  result.ms_pre, result.ms_inf, result.ms_nms, options_.batch_size, options_.img_size,
                  options_.img_size);
    table += speed;
  }
  result.table = table;

  if (!options_.save_dir.empty() && options_.plots) {
    std::vector<std::vector<double>> cm(nc_ + 1, std::vector<double>(nc_ + 1));
    for (int r = 0; r <= nc_; ++r)
      for (int c = 0; c <= nc_; ++c) cm[r][c] = confusion.at(r, c);
    plot_confusion_matrix(cm, names_, options_.save_dir + "/confusion_matrix.png");
    const ApResult& d = m.details;
    if (!d.pr_curve.empty()) {
      std::vector<double> px(kCurvePoints);
      for (int i = 0; i < kCurvePoints; ++i) px[i] = i / static_cast<double>(kCurvePoints - 1);
      std::vector<std::vector<double>> curves;
      std::vector<std::string> curve_names;
      std::vector<double> curve_ap50;
      for (size_t i = 0; i < d.pr_curve.size(); ++i) {
        if (d.pr_curve[i].empty()) continue;
        curves.push_back(d.pr_curve[i]);
        curve_ap50.push_back(d.ap[i][0]);
        const int c = d.classes[i];
        curve_names.push_back(c < static_cast<int>(names_.size()) ? names_[c] : std::to_string(c));
      }
      plot_pr_curve(px, curves, curve_ap50, curve_names, options_.save_dir + "/PR_curve.png");
      // The metric-confidence curves of every class with labels, as the reference plots them.
      std::vector<std::string> class_names;
      for (int c : d.classes) class_names.push_back(c < static_cast<int>(names_.size()) ? names_[c] : std::to_string(c));
      plot_mc_curve(px, d.f1_curve, class_names, "F1", options_.save_dir + "/F1_curve.png");
      plot_mc_curve(px, d.p_curve, class_names, "Precision", options_.save_dir + "/P_curve.png");
      plot_mc_curve(px, d.r_curve, class_names, "Recall", options_.save_dir + "/R_curve.png");
    }
  }
  if (options_.save_json && !options_.save_dir.empty()) {
    std::ofstream json(options_.save_dir + "/predictions.json");
    json << "[";
    for (size_t i = 0; i < json_rows.size(); ++i) json << (i ? ",\n" : "\n") << json_rows[i];
    json << "\n]\n";
  }
  return result;
}

}  // namespace kestrel::yolo
