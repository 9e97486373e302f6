// The run directory's images, drawn by the project (OpenCV drawing, written as PNG/JPEG through
// yolo/data/image_codec.h): results.png, labels.jpg, train/val batch mosaics, the confusion
// matrix and the precision-recall curve.
#pragma once
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "yolo/data/records.h"

namespace kestrel::yolo {

// results.png: one chart per column of results.csv (the reference's 2 x 5 grid).
void plot_results(const std::string& csv_path, const std::string& png_path);

// labels.jpg: instances per class, box centres (x, y), box sizes (w, h), and all boxes drawn
// centred on one canvas.
void plot_labels(const std::vector<data::ImageRecord>& records,
                 const std::vector<std::string>& names, const std::string& path);

// A box on a batch image, in that image's pixels; conf < 0 marks a ground-truth label.
struct PlotBox {
  int image = 0;
  int cls = 0;
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  float conf = -1;
};

// A mosaic of up to 16 images of a u8 NHWC RGB batch (CPU tensor) with boxes and class names
// (train_batch0.jpg, val_batch0_labels.jpg, val_batch0_pred.jpg). Predictions below conf_min are
// not drawn (0.25 as the reference).
void plot_batch(const Tensor& images, const std::vector<PlotBox>& boxes,
                const std::vector<std::string>& names, const std::string& path,
                float conf_min = 0.25f);

// Ground-truth boxes of a batch from its targets tensor [M, 6] (image, class, x, y, w, h
// normalised) for plot_batch.
std::vector<PlotBox> target_boxes(const Tensor& targets, int64_t height, int64_t width);

// confusion_matrix.png: (nc + 1) x (nc + 1) counts (rows predicted, columns true, last =
// background), each column normalised, as the reference plots it.
void plot_confusion_matrix(const std::vector<std::vector<double>>& matrix,
                           const std::vector<std::string>& names, const std::string& path);

// PR_curve.png: precision over recall (px: recall grid, py[c]: precision per class) with the
// per-class mAP@0.5 in the legend and the mean curve bold.
void plot_pr_curve(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                   const std::vector<double>& ap50, const std::vector<std::string>& names,
                   const std::string& path);

}  // namespace kestrel::yolo
