// The run directory's plots are produced, decodable and sized as designed. (What they look like
// was checked by eye when they were written; these tests keep them from breaking.)
#include "yolo/plot/plots.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"
#include "yolo/eval/validator.h"
#include "yolo/plot/plot_canvas.h"
#include "yolo/plot/plot_text.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

std::filesystem::path out_dir() {
  auto d = std::filesystem::temp_directory_path() / "kestrel_plots_test";
  std::filesystem::create_directories(d);
  return d;
}

// Pixels that are not (near) white in a region of an image.
int inked(const cv::Mat& image, cv::Rect region = {}) {
  if (region.empty()) region = {0, 0, image.cols, image.rows};
  cv::Mat grey;
  cv::cvtColor(image(region), grey, cv::COLOR_BGR2GRAY);
  return cv::countNonZero(grey < 230);
}

std::vector<std::string> class_names(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(i % 7 == 3 ? "a-rather-long-name-" + std::to_string(i) : "cls" + std::to_string(i));
  return names;
}

// Per-class curves over a confidence grid: class c peaks at a different confidence.
std::vector<std::vector<double>> bumps(const std::vector<double>& px, int n) {
  std::vector<std::vector<double>> py(n, std::vector<double>(px.size()));
  for (int c = 0; c < n; ++c)
    for (size_t i = 0; i < px.size(); ++i)
      py[c][i] = std::max(0.0, 0.9 - 3 * std::abs(px[i] - (0.2 + 0.6 * c / std::max(1, n - 1))) * (1 + 0.1 * c));
  return py;
}

std::vector<double> grid(int n) {
  std::vector<double> px(n);
  for (int i = 0; i < n; ++i) px[i] = i / double(n - 1);
  return px;
}

std::vector<data::ImageRecord> random_records(int nc, int images) {
  std::vector<data::ImageRecord> records(images);
  uint32_t state = 12345;
  auto next = [&] { return (state = state * 1664525u + 1013904223u) / 4294967296.0; };
  for (auto& r : records) {
    r.width = r.height = 640;
    for (int k = 0; k < 6; ++k) {
      const float w = static_cast<float>(0.05 + 0.4 * next() * next()), h = static_cast<float>(0.05 + 0.5 * next() * next());
      r.boxes.push_back({static_cast<int>(next() * nc), static_cast<float>(0.2 + 0.6 * next()),
                         static_cast<float>(0.3 + 0.5 * next()), w, h});
    }
  }
  return records;
}

}  // namespace

TEST(PlotCanvas, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(nice_ticks(0, 1, 6), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0}));
  const std::vector<double> t = nice_ticks(0.0312, 0.0987, 6);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.size(), 6u);
  EXPECT_NEAR(t[0], 0.04, 1e-12);
  EXPECT_NEAR(t[1] - t[0], 0.01, 1e-12);
  // Epochs: integer steps only, even over a short range.
  EXPECT_EQ(nice_ticks(0, 2, 6, true), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(nice_ticks(0, 299, 6, true), (std::vector<double>{0, 50, 100, 150, 200, 250}));
  EXPECT_EQ(nice_ticks(3, 3, 6), (std::vector<double>{3}));
  EXPECT_TRUE(nice_ticks(NAN, 1, 6).empty());
}

TEST(PlotCanvas, TickLabelsShowTheDecimalsTheStepNeeds) {
  EXPECT_EQ(tick_label(0.25, 0.25), "0.25");
  EXPECT_EQ(tick_label(0.5, 0.25), "0.50");
  EXPECT_EQ(tick_label(40, 10), "40");
  EXPECT_EQ(tick_label(0.04, 0.01), "0.04");
  EXPECT_EQ(tick_label(0, 0.01), "0.00");
  EXPECT_EQ(tick_label(0.0009, 0.000025), "0.000900") << "same decimals as 0.000925 beside it";
  EXPECT_EQ(tick_label(2e-7, 1e-7), "2e-07");
  EXPECT_EQ(tick_label(2e6, 1e6), "2e+06");
}

TEST(PlotText, BluesRunsFromNearWhiteToDarkBlue) {
  EXPECT_EQ(blues(0), cv::Scalar(255, 251, 247));
  EXPECT_EQ(blues(1), cv::Scalar(107, 48, 8));
  EXPECT_GT(blues(0.3)[0], blues(0.3)[2]) << "blue channel dominates";
  EXPECT_EQ(blues(2), blues(1));
}

TEST(PlotText, VerticalTextAndLegendInk) {
  cv::Mat canvas(300, 300, CV_8UC3, cv::Scalar(255, 255, 255));
  put_text_vertical(canvas, "Precision", {20, 150}, 0.6);
  EXPECT_GT(inked(canvas, {0, 60, 45, 180}), 50) << "turned text lies in a tall thin box";
  EXPECT_EQ(inked(canvas, {60, 0, 240, 300}), 0);
  const cv::Rect box = draw_legend(canvas, {{"results", {180, 119, 31}}, {"smooth", {14, 127, 255}, 2, true}},
                                   {100, 20}, 0.5);
  EXPECT_GT(box.height, 20);
  EXPECT_GT(inked(canvas, box), 100);
}

TEST(Plots, ResultsChartFromCsv) {
  const auto csv = out_dir() / "results.csv";
  std::ofstream f(csv);
  f << "               epoch,      train/box_loss,      train/obj_loss,      train/cls_loss,   "
       "metrics/precision,      metrics/recall,     metrics/mAP_0.5,metrics/mAP_0.5:0.95,        "
       "val/box_loss,        val/obj_loss,        val/cls_loss,               x/lr0,               "
       "x/lr1,               x/lr2\n";
  for (int e = 0; e < 12; ++e)
    f << e << ", " << 0.1 - e * 0.005 << ", " << 0.05 - e * 0.002 << ", " << 0.03 - e * 0.002 << ", "
      << 0.1 + e * 0.05 << ", " << 0.2 + e * 0.04 << ", " << e * 0.06 << ", " << e * 0.03 << ", "
      << 0.09 - e * 0.004 << ", " << 0.04 << ", " << 0.02 << ", 0.01, 0.01, 0.01\n";
  f.close();
  plot_results(csv.string(), (out_dir() / "results.png").string());
  cv::Mat img = data::read_image((out_dir() / "results.png").string());
  EXPECT_EQ(img.cols, 2400);  // the reference's 12 x 6 inches at 200 dpi
  EXPECT_EQ(img.rows, 1200);
  // Each of the ten panels is drawn, and each carries the results/smooth legend above its data.
  for (int k = 0; k < 10; ++k) {
    const cv::Rect panel((k % 5) * 480, (k / 5) * 600, 480, 600);
    EXPECT_GT(inked(img, {panel.x + 100, panel.y + 130, 360, 410}), 500) << "panel " << k;
    EXPECT_GT(inked(img, {panel.x + 270, panel.y + 50, 200, 70}), 100) << "legend of panel " << k;
  }
  EXPECT_THROW(plot_results((out_dir() / "missing.csv").string(), "x.png"), Error);
}

// A segmentation run's results.csv: plot_results_with_masks' 2 x 8 panels, each with the best
// epoch (by the seg fitness) starred in red and named in its legend; a last row cut short is no
// reason to read past the columns.
TEST(Plots, SegmentationResultsChartFromCsv) {
  const auto dir = out_dir() / "seg";
  std::filesystem::create_directories(dir);
  std::ofstream f(dir / "results.csv");
  f << "epoch,train/box_loss,train/seg_loss,train/obj_loss,train/cls_loss,metrics/precision(B),metrics/recall(B),"
       "metrics/mAP_0.5(B),metrics/mAP_0.5:0.95(B),metrics/precision(M),metrics/recall(M),metrics/mAP_0.5(M),"
       "metrics/mAP_0.5:0.95(M),val/box_loss,val/seg_loss,val/obj_loss,val/cls_loss,x/lr0,x/lr1,x/lr2\n";
  for (int e = 0; e < 12; ++e) {
    const double m = e == 7 ? 0.9 : 0.05 * e;  // epoch 7 is the best
    f << e << "," << 0.1 - e * 0.005 << "," << 0.2 - e * 0.01 << "," << 0.05 << "," << 0.03 << "," << 0.1 + e * 0.05
      << "," << 0.2 + e * 0.04 << "," << m << "," << m / 2 << "," << 0.1 + e * 0.04 << "," << 0.2 + e * 0.03 << ","
      << m << "," << m / 3 << "," << 0.09 - e * 0.004 << "," << 0.15 << "," << 0.04 << "," << 0.02
      << ",0.01,0.01,0.01\n";
  }
  f << "12,0.04,0.08\n";  // a row cut short (a run killed while writing): plotted as far as it goes
  f.close();
  plot_results((dir / "results.csv").string(), (dir / "results.png").string());
  cv::Mat img = data::read_image((dir / "results.png").string());
  EXPECT_EQ(img.cols, 8 * 480);
  EXPECT_EQ(img.rows, 2 * 600);
  const auto red = [&](const cv::Rect& r) {
    int n = 0;
    for (int y = r.y; y < r.y + r.height; ++y)
      for (int x = r.x; x < r.x + r.width; ++x) {
        const cv::Vec3b p = img.at<cv::Vec3b>(y, x);
        n += p[2] > 170 && p[1] < 90 && p[0] < 90;
      }
    return n;
  };
  for (int k = 0; k < 16; ++k) {
    const cv::Rect panel((k % 8) * 480, (k / 8) * 600, 480, 600);
    EXPECT_GT(inked(img, {panel.x + 100, panel.y + 130, 360, 410}), 500) << "panel " << k;
    EXPECT_GT(red({panel.x + 100, panel.y + 130, 360, 410}), 20) << "best-epoch star in panel " << k;
  }
}

TEST(Plots, LabelsBatchConfusionAndPr) {
  std::vector<data::ImageRecord> records(3);
  for (int i = 0; i < 3; ++i) {
    records[i].width = records[i].height = 320;
    records[i].boxes = {{i % 2, 0.3f + 0.1f * i, 0.5f, 0.2f, 0.3f}, {2, 0.7f, 0.2f, 0.1f, 0.1f}};
  }
  const std::vector<std::string> names = {"circle", "square", "triangle"};
  plot_labels(records, names, (out_dir() / "labels.jpg").string());
  EXPECT_EQ(data::read_image((out_dir() / "labels.jpg").string()).cols, 1600);

  Tensor images = Tensor::full({4, 64, 96, 3}, 120, DType::U8);
  Tensor targets = Tensor::from_vector<float>({0, 1, 0.5f, 0.5f, 0.4f, 0.4f, 3, 2, 0.2f, 0.3f, 0.2f, 0.2f}, {2, 6});
  std::vector<PlotBox> boxes = target_boxes(targets, 64, 96);
  ASSERT_EQ(boxes.size(), 2u);
  EXPECT_FLOAT_EQ(boxes[0].x1, 0.3f * 96);
  EXPECT_FLOAT_EQ(boxes[1].y2, 0.4f * 64);
  boxes.push_back({1, 0, 10, 10, 40, 40, 0.9f});
  boxes.push_back({1, 0, 10, 10, 40, 40, 0.1f});  // below conf_min: not drawn
  plot_batch(images, {"a.jpg", "b.jpg", "c.jpg", "d.jpg"}, boxes, names, (out_dir() / "train_batch0.jpg").string());
  cv::Mat mosaic = data::read_image((out_dir() / "train_batch0.jpg").string());
  EXPECT_EQ(mosaic.cols, 2 * 96);
  EXPECT_EQ(mosaic.rows, 2 * 64);

  plot_confusion_matrix({{5, 1, 0, 1}, {0, 4, 1, 0}, {0, 0, 6, 2}, {1, 0, 0, 0}}, names,
                        (out_dir() / "confusion_matrix.png").string());
  std::vector<double> px(101), p0(101), p1(101), p2(101);
  for (int i = 0; i <= 100; ++i) {
    px[i] = i / 100.0;
    p0[i] = 1 - 0.3 * px[i];
    p1[i] = 1 - px[i] * px[i];
    p2[i] = 0.9 - 0.5 * px[i];
  }
  plot_pr_curve(px, {p0, p1, p2}, {0.85, 0.67, 0.65}, names, (out_dir() / "PR_curve.png").string());
  cv::Mat pr = data::read_image((out_dir() / "PR_curve.png").string());
  EXPECT_EQ(pr.cols, 1350);
  EXPECT_EQ(pr.rows, 900);
}

TEST(Plots, MetricConfidenceCurvesAt4And80Classes) {
  const std::vector<double> px = grid(1000);
  for (int nc : {4, 80}) {
    const std::vector<std::vector<double>> py = bumps(px, nc);
    for (const char* metric : {"F1", "Precision", "Recall"}) {
      const auto path = out_dir() / (std::string(metric) + "_curve_" + std::to_string(nc) + ".png");
      plot_mc_curve(px, py, class_names(nc), metric, path.string());
      cv::Mat img = data::read_image(path.string());
      ASSERT_EQ(img.cols, 1350) << path;
      EXPECT_EQ(img.rows, 900);
      EXPECT_GT(inked(img, {90, 50, 500, 770}), 2000) << "curves drawn: " << path;
      // The legend right of the plot area: one row per class below 21 classes, else only the mean.
      const int legend_ink = inked(img, {1000, 50, 350, 400});
      EXPECT_GT(legend_ink, 300) << path;
      if (nc == 80) {
        EXPECT_EQ(inked(img, {1000, 200, 350, 400}), 0) << "no per-class legend at 80 classes";
      }
    }
  }
}

TEST(Plots, McCurveSummaryNamesTheBestSmoothedMean) {
  const std::vector<double> px = grid(1000);
  std::vector<double> y(px.size());
  for (size_t i = 0; i < px.size(); ++i) y[i] = 1 - std::abs(px[i] - 0.4);
  EXPECT_EQ(mc_curve_summary(px, {y, y}), "all classes 0.99 at 0.400");
}

TEST(Plots, LabelsAt80Classes) {
  const auto path = out_dir() / "labels_80.jpg";
  plot_labels(random_records(80, 200), class_names(80), path.string());
  cv::Mat img = data::read_image(path.string());
  ASSERT_EQ(img.cols, 1600);
  for (int k = 0; k < 4; ++k)
    EXPECT_GT(inked(img, {(k % 2) * 800 + 100, (k / 2) * 800 + 60, 650, 600}), 1000) << "panel " << k;
}

TEST(Plots, CorrelogramIsALowerTriangleOfHistograms) {
  const auto path = out_dir() / "labels_correlogram.jpg";
  plot_labels_correlogram(random_records(80, 200), path.string());
  cv::Mat img = data::read_image(path.string());
  ASSERT_EQ(img.cols, 2000);
  ASSERT_EQ(img.rows, 2000);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const cv::Rect plot(j * 500 + 100, i * 500 + 35, 380, 390);
      if (j <= i)
        EXPECT_GT(inked(img, plot), 300) << "panel " << i << "," << j;
      else
        EXPECT_EQ(inked(img, plot), 0) << "upper triangle stays empty: " << i << "," << j;
    }
}

TEST(Plots, ConfusionMatrixAtTheReferenceSizeAt4And80Classes) {
  for (int nc : {4, 80}) {
    std::vector<std::vector<double>> m(nc + 1, std::vector<double>(nc + 1, 0));
    for (int c = 0; c <= nc; ++c) {
      m[c][c] = 10 + c % 5;
      m[(c + 1) % (nc + 1)][c] = 3;
      m[nc][c] += 1;
    }
    const auto path = out_dir() / ("confusion_matrix_" + std::to_string(nc) + ".png");
    plot_confusion_matrix(m, class_names(nc), path.string());
    cv::Mat img = data::read_image(path.string());
    ASSERT_EQ(img.cols, 3000);
    ASSERT_EQ(img.rows, 2250);
    EXPECT_GT(inked(img, {0, 0, 3000, 100}), 200) << "title";
    EXPECT_GT(inked(img, {0, 2150, 3000, 100}), 200) << "'True' under the names";
    EXPECT_GT(inked(img, {0, 1000, 450, 250}), 200) << "'Predicted' left of the names";
  }
}

// Pixels of `image` within `tolerance` of `colour` in each channel (JPEG and anti-aliasing blur).
int near_colour(const cv::Mat& image, cv::Scalar colour, int tolerance = 40, cv::Rect region = {}) {
  if (region.empty()) region = {0, 0, image.cols, image.rows};
  cv::Mat mask;
  cv::inRange(image(region),
              cv::Scalar(colour[0] - tolerance, colour[1] - tolerance, colour[2] - tolerance),
              cv::Scalar(colour[0] + tolerance, colour[1] + tolerance, colour[2] + tolerance), mask);
  return cv::countNonZero(mask);
}

// As the reference: below 21 classes each class's curve has its own colour from matplotlib's
// cycle and the legend names it; the mean is a thick pure-blue line. Above 20, the classes are grey.
TEST(Plots, PrCurvesInTheReferencesColours) {
  const std::vector<double> px = grid(200);
  const cv::Rect area(90, 50, 700, 770);  // inside the chart, left of the legend
  for (int nc : {3, 25}) {
    std::vector<std::vector<double>> py(nc, std::vector<double>(px.size()));
    std::vector<double> ap(nc);
    for (int c = 0; c < nc; ++c) {
      for (size_t i = 0; i < px.size(); ++i) py[c][i] = std::clamp(1.0 - std::pow(px[i], 1.0 + 2.0 * c), 0.0, 1.0);
      ap[c] = 0.5 + 0.01 * c;
    }
    const auto path = out_dir() / ("PR_curve_" + std::to_string(nc) + ".png");
    plot_pr_curve(px, py, ap, class_names(nc), path.string());
    const cv::Mat img = data::read_image(path.string());
    EXPECT_GT(near_colour(img, {255, 0, 0}, 10, area), 1500) << "the thick blue mean";
    if (nc == 3) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_GT(near_colour(img, tab10(c), 10, area), 300) << "class " << c << " in its own colour";
        EXPECT_GT(near_colour(img, tab10(c), 10, {880, 40, 470, 260}), 10) << "class " << c << " in the legend";
      }
      EXPECT_NE(tab10(0), tab10(1));
      EXPECT_NE(tab10(1), tab10(2));
      EXPECT_EQ(near_colour(img, {128, 128, 128}, 3, area), 0) << "no grey class lines";
    } else {
      EXPECT_EQ(near_colour(img, tab10(1), 10, area), 0) << "no per-class colours above 20 classes";
      EXPECT_GT(near_colour(img, {128, 128, 128}, 10, area), 1000) << "grey class lines";
    }
  }
  EXPECT_EQ(tab10(10), tab10(0)) << "the cycle repeats";
}

// The reference's plot_images geometry: tiles down each column first, at most 1920 px, text and
// lines that grow with the mosaic.
TEST(Plots, BatchMosaicLayoutAsTheReference) {
  const BatchMosaicLayout full = batch_mosaic_layout(16, 640, 640);
  EXPECT_EQ(full.grid, 4);
  EXPECT_EQ(full.tile_w, 480);
  EXPECT_EQ(full.font_px, 38);  // int((480 + 480) * 4 * 0.01)
  EXPECT_EQ(full.line, 4);
  EXPECT_EQ(full.tile(1), cv::Rect(0, 480, 480, 480));  // the second image is below the first
  EXPECT_EQ(full.tile(4), cv::Rect(480, 0, 480, 480));
  const BatchMosaicLayout small = batch_mosaic_layout(5, 64, 96);
  EXPECT_EQ(small.grid, 3);
  EXPECT_EQ(small.tile_w, 96);
  EXPECT_EQ(small.font_px, 4);  // int((64 + 96) * 3 * 0.01)
  EXPECT_EQ(batch_mosaic_layout(32, 100, 100).count, 16);
  EXPECT_EQ(batch_mosaic_layout(4, 1000, 1001).tile_h, 960);  // ceil(959.04): 1920 / 2 / 1001 * 1000
}

// Each image lands in its tile (column by column) with its file name in the tile's top-left corner.
TEST(Plots, BatchMosaicTileOrderAndCaptions) {
  const int n = 5, h = 320, w = 320;
  Tensor images = Tensor::empty({n, h, w, 3}, DType::U8);
  for (int i = 0; i < n; ++i)
    std::fill_n(images.data<uint8_t>() + static_cast<size_t>(i) * h * w * 3, h * w * 3, static_cast<uint8_t>(20 + 15 * i));
  std::vector<std::string> files;
  for (int i = 0; i < n; ++i) files.push_back("/data/images/image_" + std::to_string(i) + ".jpg");
  const auto path = out_dir() / "order_batch.jpg";
  plot_batch(images, files, {}, {"a"}, path.string());
  const cv::Mat mosaic = data::read_image(path.string());
  const BatchMosaicLayout l = batch_mosaic_layout(n, h, w);
  ASSERT_EQ(mosaic.cols, l.grid * l.tile_w);
  for (int i = 0; i < n; ++i) {
    const cv::Rect t = l.tile(i);
    const cv::Vec3b centre = mosaic.at<cv::Vec3b>(t.y + t.height / 2, t.x + t.width / 2);
    EXPECT_NEAR(centre[0], 20 + 15 * i, 3) << "image " << i << " in tile " << t;
    // The caption: light-grey text in the top-left corner, nowhere else in the tile.
    const cv::Rect corner(t.x + 5, t.y + 5, t.width / 2, l.font_px + 4);
    const cv::Rect rest(t.x + 10, t.y + l.font_px + 12, t.width - 20, t.height - l.font_px - 22);
    EXPECT_GT(near_colour(mosaic, {220, 220, 220}, 25, corner), 30) << "caption of image " << i;
    EXPECT_EQ(near_colour(mosaic, {220, 220, 220}, 25, rest), 0) << "image " << i;
  }
  EXPECT_EQ(l.tile(1).x, 0);
  EXPECT_GT(l.tile(1).y, 0);
}

// study.png from val --task study's files (rows of 10 numbers), and a malformed row refused.
TEST(Plots, ValStudy) {
  const std::filesystem::path dir = out_dir() / "study";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "study_coco_yolov5n.txt") << "0.5 0.4 0.30 0.20 0 0 0 0.1 5.0 0.2\n"
                                                 << "0.5 0.4 0.35 0.24 0 0 0 0.1 7.0 0.2\n"
                                                 << "0.5 0.4 0.36 0.26 0 0 0 0.1 9.0 0.2\n";
  plot_val_study(dir.string(), (dir / "study.png").string());
  EXPECT_GT(std::filesystem::file_size(dir / "study.png"), 1000u);
  std::ofstream(dir / "study_bad.txt") << "1 2 3\n";
  EXPECT_THROW(plot_val_study(dir.string(), (dir / "study2.png").string()), kestrel::Error);
}
