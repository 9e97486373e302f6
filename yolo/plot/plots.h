// The run directory's images, drawn by the project (OpenCV drawing, written as PNG/JPEG through
// yolo/data/image_codec.h): results.png, labels.jpg, labels_correlogram.jpg, train/val batch
// mosaics, the confusion matrix, the precision-recall curve and the F1/P/R-confidence curves.
// Defined in plots.cpp (results, batches), plot_labels.cpp, plot_confusion.cpp and
// plot_curves.cpp.
#pragma once
#include <opencv2/core.hpp>

#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "yolo/data/records.h"

namespace kestrel::yolo {

// study.png: val --task study's curves, one per study*.txt in `folder` (mAP50-95 x 100 over the
// inference milliseconds per image, from the second image size up to the best), as the reference's
// plot_val_study without its EfficientDet line.
void plot_val_study(const std::string& folder, const std::string& png_path);

// results.png: one chart per column of results.csv: detection's 2 x 5 grid (plot_results), a
// segmentation run's 2 x 8 with the best epoch starred (plot_results_with_masks), other runs'
// columns five to a row.
void plot_results(const std::string& csv_path, const std::string& png_path);

// labels.jpg: instances per class, box centres (x, y), box sizes (w, h), and all boxes drawn
// centred on one canvas.
void plot_labels(const std::vector<data::ImageRecord>& records,
                 const std::vector<std::string>& names, const std::string& path);

// labels_correlogram.jpg: the reference's pairplot of the labels' x, y, width and height
// (normalised): a histogram of each on the diagonal, 2-D histograms of each pair below it.
void plot_labels_correlogram(const std::vector<data::ImageRecord>& records, const std::string& path);

// A box on a batch image, in that image's pixels; conf < 0 marks a ground-truth label.
struct PlotBox {
  int image = 0;
  int cls = 0;
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  float conf = -1;
};

// The geometry of a batch mosaic, as the reference's plot_images lays it out: up to 16 images in
// a square grid filled down each column first, tiles scaled so the mosaic is at most 1920 px
// (sides rounded up), text of font_px = (tile_h + tile_w) x grid / 100 pixels and boxes
// font_px / 10 wide.
struct BatchMosaicLayout {
  int count = 0, grid = 0, tile_h = 0, tile_w = 0, font_px = 0, line = 1;
  double scale = 1;
  cv::Rect tile(int i) const;  // image i's tile in the mosaic
};
BatchMosaicLayout batch_mosaic_layout(int64_t images, int64_t height, int64_t width);

// A mosaic of up to 16 images of a u8 NHWC RGB batch (CPU tensor) with each image's file name at
// the top left of its tile, boxes and class names (train_batch0.jpg, val_batch0_labels.jpg,
// val_batch0_pred.jpg). Predictions at or below conf_min are not drawn (0.25 as the reference),
// the others with their confidence to one decimal.
void plot_batch(const Tensor& images, const std::vector<std::string>& files, const std::vector<PlotBox>& boxes,
                const std::vector<std::string>& names, const std::string& path, float conf_min = 0.25f);

// One instance's mask for plot_batch_with_masks: a u8 (h, w) plane of 0/1 on any grid (resized
// to the tile as the reference's cv2.resize), drawn in its class's colour; a prediction's (conf
// >= 0) only above conf_min, as its boxes.
struct PlotMask {
  int64_t image = 0;
  int cls = 0;
  Tensor plane;
  float conf = -1;
};
// The 0/1 plane of a (..., h, w) mask holding one plane (float or integer): 1 where it equals
// `value` (an overlap image's instance number, or 1).
Tensor mask_plane(const Tensor& mask, float value);
// plot_batch with each instance's mask blended into its tile (pixel * 0.4 + colour * 0.6), as
// the reference's plot_images_and_masks (val_batch0_labels.jpg / _pred.jpg of segment/val.py).
void plot_batch_with_masks(const Tensor& images, const std::vector<std::string>& files,
                           const std::vector<PlotBox>& boxes, const std::vector<PlotMask>& masks,
                           const std::vector<std::string>& names, const std::string& path,
                           float conf_min = 0.25f);

// confusion_matrix.png at the reference's 3000 x 2250: (nc + 1) x (nc + 1) counts (rows
// predicted, columns true, last = background), each column normalised, in the Blues colour map
// with a colour bar; values written in the cells below 30 classes, class names on the axes below
// 99 names (as the reference).
void plot_confusion_matrix(const std::vector<std::vector<double>>& matrix,
                           const std::vector<std::string>& names, const std::string& path);

// PR_curve.png: precision over recall (px: recall grid, py[c]: precision per class) with the
// per-class mAP@0.5 in the legend and the mean curve bold.
// map50: the legend's "all classes" figure, the reference's ap[:, 0].mean() over every class with
// labels (those without predictions have no curve but count, as 0): the console's mAP50. Without
// it, the mean of ap50.
void plot_pr_curve(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                   const std::vector<double>& ap50, const std::vector<std::string>& names,
                   const std::string& path, std::optional<double> map50 = std::nullopt);

// F1_curve.png, P_curve.png, R_curve.png: a metric over confidence (px: the confidence grid,
// py[c]: per class), a thin line per class (named in the legend below 21 classes, grey above) and
// the all-classes mean, smoothed as the reference, in bold with its best value in the legend.
void plot_mc_curve(const std::vector<double>& px, const std::vector<std::vector<double>>& py,
                   const std::vector<std::string>& names, const std::string& ylabel,
                   const std::string& path);
// That bold line's legend: "all classes 0.62 at 0.412" (best smoothed mean, and its confidence).
std::string mc_curve_summary(const std::vector<double>& px, const std::vector<std::vector<double>>& py);

}  // namespace kestrel::yolo
