// What every task's validation writes besides its table, shared by the detection and
// segmentation validators (validator.cpp, seg_validator.cpp): labels/<image>.txt rows, the
// COCO-format json rows and file, the metric curves and confusion matrix, the speed line.
#pragma once
#include <string>
#include <vector>

#include "io/json.h"
#include "yolo/data/augment_pipeline.h"
#include "yolo/eval/coco_eval.h"
#include "yolo/eval/metrics.h"

namespace kestrel::yolo {

std::string file_stem(const std::string& path);
// names[c], or the number when the names stop short.
std::string class_name(const std::vector<std::string>& names, int c);
// Python's round(x, digits): the correctly rounded decimal, read back as a double.
double round_digits(double x, int digits);

// labels/<image>.txt: class and normalised centre box per detection, optionally its confidence.
// d: rows of `cols` floats (x1, y1, x2, y2, conf, class, ...) in the original image's pixels.
void write_detections_txt(const std::vector<float>& d, int64_t cols, const data::SampleShapes& shapes,
                          const std::string& path, bool save_conf);

// The COCO-format rows of one image, as the reference's save_one_json: a numeric file stem is
// the image id as a number; the box is x, y, w, h from the float32 centre form, rounded to 3
// digits, the score to 5. d as for write_detections_txt; one object per row.
std::vector<json::Object> detection_json_rows(const std::vector<float>& d, int64_t cols, const std::string& path,
                                              bool coco_ids);
// predictions.json: one detection object per line.
void write_predictions_json(const json::Array& rows, const std::string& path);

// The confusion matrix, and the PR, F1, P and R curves of `details` (ap_per_class's), with file
// names prefixed by `prefix` ("" for detection, "Box"/"Mask" for segmentation, as the reference's
// ap_per_class prefix). `map50` is the legend's "all classes" figure.
void plot_confusion(const ConfusionMatrix& confusion, const std::vector<std::string>& names, int nc,
                    const std::string& dir);
void plot_curves(const ApResult& details, double map50, const std::vector<std::string>& names,
                 const std::string& dir, const std::string& prefix = "");

// "Speed: 0.3ms pre-process, 12.1ms inference, 1.0ms NMS per image at shape (32, 3, 640, 640)\n".
std::string speed_line(double ms_pre, double ms_inf, double ms_nms, int batch_size, int img_size);

// The ground truth --coco-eval scores against: the file `coco_gt`, with `options` limited to the
// split's images, or ("") one made from the split's YOLO labels (coco_labels_json).
CocoGroundTruth coco_eval_ground_truth(const std::vector<data::ImageRecord>& records,
                                       const std::vector<std::string>& names, const std::string& coco_gt,
                                       bool coco_ids, bool single_cls, CocoEvalOptions& options);

}  // namespace kestrel::yolo
