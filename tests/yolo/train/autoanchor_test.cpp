// AutoAnchor: the fit metric on hand-made cases, k-means recovering known clusters, and
// check_anchors keeping good anchors and replacing poor ones.
#include "yolo/train/autoanchor.h"

#include <regex>

#include "tests/support/testing.h"
#include "yolo/model/model.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

// Square 640x640 images, each with one box of the given pixel size.
std::vector<data::ImageRecord> records_with_sizes(const std::vector<std::pair<float, float>>& px) {
  std::vector<data::ImageRecord> out;
  for (const auto& [w, h] : px) {
    data::ImageRecord r;
    r.image_path = "x.jpg";
    r.width = r.height = 640;
    r.boxes.push_back({0, 0.5f, 0.5f, w / 640.0f, h / 640.0f});
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(AutoAnchor, FitMetric) {
  std::vector<std::pair<float, float>> anchors = {{10, 10}, {100, 50}};
  AnchorFit exact = anchor_fit({{10, 10}, {100, 50}}, anchors, 4.0);
  EXPECT_DOUBLE_EQ(exact.bpr, 1.0);
  // 10x10 vs anchor 100x50: ratios 0.1, 0.2 -> outside thr 4; so each label fits one anchor.
  EXPECT_DOUBLE_EQ(exact.anchors_per_target, 1.0);
  AnchorFit off = anchor_fit({{50, 50}, {1000, 1000}}, anchors, 4.0);
  // 50x50 fits 10x10? 10/50 = 0.2 < 0.25: no. 100x50: 0.5 and 1.0 -> yes. 1000x1000: none.
  EXPECT_DOUBLE_EQ(off.bpr, 0.5);
}

TEST(AutoAnchor, KmeansRecoversClusters) {
  std::vector<std::pair<float, float>> px;
  for (int i = 0; i < 30; ++i) {
    const float j = static_cast<float>(i % 5);
    px.push_back({12 + j, 20 - j});
    px.push_back({80 + j, 60 + j});
    px.push_back({300 - j, 200 + j});
  }
  Generator gen(0);
  auto k = kmean_anchors(records_with_sizes(px), 3, 640, 4.0, 200, gen);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_NEAR(k[0].first, 14, 4);
  EXPECT_NEAR(k[1].first, 82, 12);
  EXPECT_NEAR(k[2].second, 202, 30);
  EXPECT_DOUBLE_EQ(anchor_fit({{14, 18}, {82, 62}, {298, 202}}, k, 4.0).bpr, 1.0);
}

// The report ends with the reference's print_results: recall and anchors past thr at its precision,
// then n, img_size, the metric's means and the anchors as '%i,%i, '.
TEST(AutoAnchor, ReportsAsTheReference) {
  std::vector<std::pair<float, float>> px;
  for (int i = 0; i < 30; ++i) {
    const float j = static_cast<float>(i % 5);
    px.push_back({12 + j, 20 - j});
    px.push_back({80 + j, 60 + j});
    px.push_back({300 - j, 200 + j});
  }
  Generator gen(0);
  std::string log;
  kmean_anchors(records_with_sizes(px), 3, 640, 4.0, 50, gen, &log);
  const std::regex lines(
      "AutoAnchor: thr=0\\.25: 1\\.0000 best possible recall, \\d\\.\\d\\d anchors past thr\n"
      "AutoAnchor: n=3, img_size=640, metric_all=0\\.\\d{3}/0\\.\\d{3}-mean/best, past_thr=0\\.\\d{3}-mean: "
      "\\d+,\\d+, \\d+,\\d+, \\d+,\\d+\n$");
  EXPECT_TRUE(std::regex_search(log, lines)) << log;
}

TEST(AutoAnchor, CheckKeepsGoodAndReplacesPoorAnchors) {
  DetectionModel model(load_model_config("models/yolov5n.yaml"), 1, 0);
  Generator gen(1);
  // Boxes like the default anchors: a good fit, nothing changes.
  std::vector<std::pair<float, float>> good;
  for (int i = 0; i < 20; ++i) good.push_back({30.0f + i, 60.0f + i});
  const auto before = model.detect().anchors.to_vector<float>();
  std::string report = check_anchors(records_with_sizes(good), model.detect(), 4.0, 640, gen);
  EXPECT_NE(report.find("good fit"), std::string::npos) << report;
  EXPECT_EQ(model.detect().anchors.to_vector<float>(), before);

  // Very wide boxes no default anchor fits within 4x: anchors are evolved and replaced.
  std::vector<std::pair<float, float>> wide;
  for (int i = 0; i < 60; ++i) wide.push_back({400.0f + 3 * i, 8.0f + (i % 4)});
  report = check_anchors(records_with_sizes(wide), model.detect(), 4.0, 640, gen);
  EXPECT_NE(report.find("Done (optional"), std::string::npos) << report;
  EXPECT_NE(model.detect().anchors.to_vector<float>(), before);
}
