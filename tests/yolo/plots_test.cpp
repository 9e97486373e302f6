// The run directory's plots are produced, decodable and sized as designed. (What they look like
// was checked by eye when they were written; these tests keep them from breaking.)
#include "yolo/plots.h"

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

std::filesystem::path out_dir() {
  auto d = std::filesystem::temp_directory_path() / "kestrel_plots_test";
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

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
  EXPECT_EQ(img.cols, 1600);
  EXPECT_EQ(img.rows, 520);
  EXPECT_THROW(plot_results((out_dir() / "missing.csv").string(), "x.png"), Error);
}

TEST(Plots, LabelsBatchConfusionAndPr) {
  std::vector<data::ImageRecord> records(3);
  for (int i = 0; i < 3; ++i) {
    records[i].width = records[i].height = 320;
    records[i].boxes = {{i % 2, 0.3f + 0.1f * i, 0.5f, 0.2f, 0.3f}, {2, 0.7f, 0.2f, 0.1f, 0.1f}};
  }
  const std::vector<std::string> names = {"circle", "square", "triangle"};
  plot_labels(records, names, (out_dir() / "labels.jpg").string());
  EXPECT_EQ(data::read_image((out_dir() / "labels.jpg").string()).cols, 800);

  Tensor images = Tensor::full({4, 64, 96, 3}, 120, DType::U8);
  Tensor targets = Tensor::from_vector<float>({0, 1, 0.5f, 0.5f, 0.4f, 0.4f, 3, 2, 0.2f, 0.3f, 0.2f, 0.2f}, {2, 6});
  std::vector<PlotBox> boxes = target_boxes(targets, 64, 96);
  ASSERT_EQ(boxes.size(), 2u);
  EXPECT_FLOAT_EQ(boxes[0].x1, 0.3f * 96);
  EXPECT_FLOAT_EQ(boxes[1].y2, 0.4f * 64);
  boxes.push_back({1, 0, 10, 10, 40, 40, 0.9f});
  boxes.push_back({1, 0, 10, 10, 40, 40, 0.1f});  // below conf_min: not drawn
  plot_batch(images, boxes, names, (out_dir() / "train_batch0.jpg").string());
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
  EXPECT_EQ(data::read_image((out_dir() / "PR_curve.png").string()).cols, 900);
}
