#include "yolo/eval/val_outputs.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "yolo/eval/coco_eval.h"
#include "yolo/plot/plots.h"

namespace kestrel::yolo {

std::string file_stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

std::string class_name(const std::vector<std::string>& names, int c) {
  return c < static_cast<int>(names.size()) ? names[c] : std::to_string(c);
}

double round_digits(double x, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return std::strtod(text, nullptr);
}

void write_detections_txt(const std::vector<float>& d, int64_t cols, const data::SampleShapes& shapes,
                          const std::string& path, bool save_conf) {
  std::ofstream txt(path);
  const double gw = shapes.w0, gh = shapes.h0;
  for (size_t k = 0; k + cols <= d.size(); k += cols) {
    txt << static_cast<int>(d[k + 5]) << " " << (d[k] + d[k + 2]) / 2 / gw << " " << (d[k + 1] + d[k + 3]) / 2 / gh
        << " " << (d[k + 2] - d[k]) / gw << " " << (d[k + 3] - d[k + 1]) / gh;
    if (save_conf) txt << " " << d[k + 4];
    txt << "\n";
  }
}

std::vector<json::Object> detection_json_rows(const std::vector<float>& d, int64_t cols, const std::string& path,
                                              bool coco_ids) {
  const CocoImageId id = coco_image_id(path);
  const json::Value image_id = std::holds_alternative<int64_t>(id) ? json::Value(std::get<int64_t>(id))
                                                                   : json::Value(std::get<std::string>(id));
  std::vector<json::Object> rows;
  for (size_t k = 0; k + cols <= d.size(); k += cols) {
    const int c = static_cast<int>(d[k + 5]);
    const float w = d[k + 2] - d[k], h = d[k + 3] - d[k + 1];
    const float x = (d[k] + d[k + 2]) / 2 - w / 2, y = (d[k + 1] + d[k + 3]) / 2 - h / 2;
    json::Array bbox;
    for (float v : {x, y, w, h}) bbox.emplace_back(round_digits(v, 3));
    rows.push_back(json::Object{{"image_id", image_id},
                                {"category_id", coco_category_id(c, coco_ids)},
                                {"bbox", std::move(bbox)},
                                {"score", round_digits(d[k + 4], 5)}});
  }
  return rows;
}

void write_predictions_json(const json::Array& rows, const std::string& path) {
  std::ofstream out(path);
  out << "[";
  for (size_t i = 0; i < rows.size(); ++i) out << (i ? ",\n" : "\n") << json::dump(rows[i]);
  out << "\n]\n";
}

void plot_confusion(const ConfusionMatrix& confusion, const std::vector<std::string>& names, int nc,
                    const std::string& dir) {
  std::vector<std::vector<double>> cm(nc + 1, std::vector<double>(nc + 1));
  for (int r = 0; r <= nc; ++r)
    for (int c = 0; c <= nc; ++c) cm[r][c] = confusion.at(r, c);
  plot_confusion_matrix(cm, names, dir + "/confusion_matrix.png");
}

void plot_curves(const ApResult& d, double map50, const std::vector<std::string>& names, const std::string& dir,
                 const std::string& prefix) {
  if (d.pr_curve.empty()) return;
  std::vector<double> px(kCurvePoints);
  for (int i = 0; i < kCurvePoints; ++i) px[i] = i / static_cast<double>(kCurvePoints - 1);
  std::vector<std::vector<double>> curves;
  std::vector<std::string> curve_names;
  std::vector<double> curve_ap50;
  for (size_t i = 0; i < d.pr_curve.size(); ++i) {
    if (d.pr_curve[i].empty()) continue;
    curves.push_back(d.pr_curve[i]);
    curve_ap50.push_back(d.ap[i][0]);
    curve_names.push_back(class_name(names, d.classes[i]));
  }
  // The legend's "all classes" figure is the console's mAP50 (every class with labels), as the
  // reference's ap[:, 0].mean(); the curves are those of the classes with predictions.
  plot_pr_curve(px, curves, curve_ap50, curve_names, dir + "/" + prefix + "PR_curve.png", map50);
  // The metric-confidence curves of every class with labels, as the reference plots them.
  std::vector<std::string> class_names;
  for (int c : d.classes) class_names.push_back(class_name(names, c));
  plot_mc_curve(px, d.f1_curve, class_names, "F1", dir + "/" + prefix + "F1_curve.png");
  plot_mc_curve(px, d.p_curve, class_names, "Precision", dir + "/" + prefix + "P_curve.png");
  plot_mc_curve(px, d.r_curve, class_names, "Recall", dir + "/" + prefix + "R_curve.png");
}

std::string speed_line(double ms_pre, double ms_inf, double ms_nms, int batch_size, int img_size) {
  char speed[160];
  std::snprintf(speed, sizeof speed,
                "Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (%d, 3, %d, %d)\n",
                ms_pre, ms_inf, ms_nms, batch_size, img_size, img_size);
  return speed;
}

CocoGroundTruth coco_eval_ground_truth(const std::vector<data::ImageRecord>& records,
                                       const std::vector<std::string>& names, const std::string& coco_gt,
                                       bool coco_ids, bool single_cls, CocoEvalOptions& options) {
  if (coco_gt.empty()) return parse_coco_ground_truth(coco_labels_json(records, names, coco_ids, single_cls), "the labels");
  options.image_ids.emplace();
  for (const data::ImageRecord& r : records) options.image_ids->push_back(coco_image_id(r.image_path));
  return read_coco_ground_truth(coco_gt);
}

}  // namespace kestrel::yolo
