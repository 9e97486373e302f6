// `kestrel segment predict` as the reference v7.0's segment/predict.py, on
// tests/data/yolov5n_seg_seeded.pt (a seeded, untrained yolov5n-seg: its confidences sit near
// 2e-4, hence --conf-thres 0.000195) and the two small images of tests/data/segment_predict/:
// - RecordedReference: the --save-txt polygons (class, normalised x y pairs, confidence) and the
//   drawn images (--hide-labels: OpenCV's Hershey glyphs differ between its releases) equal those
//   the reference wrote (tests/scripts/segment_predict_reference.py, recorded in the fixture), by
//   default and with --retina-masks;
// - LiveReference: the same against the reference run now, where PyTorch and its source are.
// Tolerances: a polygon point may move by a pixel of the mask (a mask value within an ulp of 0.5
// may flip between the two sides' float32 sums), the confidence by 1e-4 relative (printed with
// six digits from float32 values that differ in their last bits), an image pixel by 1 level
// anywhere and by more on at most 1% of the pixels (flipped mask pixels). Today they match exactly.
// The rest: the family's routing, refusals with clear messages, and the shared flags' outputs.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

namespace {

const char* kWeights = "tests/data/yolov5n_seg_seeded.pt";
const fs::path kFixture = "tests/data/segment_predict";

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_segment_predict_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string predict_args(const fs::path& project, const std::string& name) {
  return std::string("segment predict --weights ") + kWeights + " --source " + (kFixture / "images").string() +
         " --img 128 --conf-thres 0.000195 --max-det 6 --device cpu --save-txt --save-conf --hide-labels --project " +
         project.string() + " --name " + name + " --exist-ok";
}

std::vector<std::vector<double>> read_rows(const fs::path& path) {
  std::vector<std::vector<double>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<double> row;
    for (double v; words >> v;) row.push_back(v);
    rows.push_back(row);
  }
  return rows;
}

// Each line: class equal, as many points, each coordinate within a mask pixel mapped to the image
// (the input is 128 at most, the images 70 to 100 pixels a side: 2 / 70 covers it), conf close.
void expect_same_labels(const fs::path& got, const fs::path& want) {
  const auto g = read_rows(got), w = read_rows(want);
  ASSERT_EQ(g.size(), w.size()) << got << " vs " << want;
  ASSERT_FALSE(w.empty()) << want;
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(g[i].size(), w[i].size()) << got << " line " << i + 1;
    EXPECT_EQ(g[i][0], w[i][0]) << got << " line " << i + 1;
    for (size_t k = 1; k + 1 < w[i].size(); ++k) EXPECT_NEAR(g[i][k], w[i][k], 2.0 / 70) << got << " line " << i + 1;
    EXPECT_NEAR(g[i].back(), w[i].back(), 1e-4 * w[i].back()) << got << " line " << i + 1;
  }
}

void expect_same_image(const fs::path& got, const fs::path& want) {
  const cv::Mat g = kestrel::yolo::data::read_image(got.string()), w = kestrel::yolo::data::read_image(want.string());
  ASSERT_EQ(g.size(), w.size()) << got;
  cv::Mat diff;
  cv::absdiff(g, w, diff);
  int over_one = 0;
  for (int y = 0; y < diff.rows; ++y)
    for (int x = 0; x < diff.cols * 3; ++x) over_one += diff.ptr<uint8_t>(y)[x] > 1;
  EXPECT_LE(over_one, diff.rows * diff.cols * 3 / 100) << got << " differs from " << want;
}

void expect_like_reference(const fs::path& kestrel_run, const fs::path& reference_run) {
  for (const char* stem : {"a", "b"}) {
    expect_same_labels(kestrel_run / "labels" / (std::string(stem) + ".txt"),
                       reference_run / "labels" / (std::string(stem) + ".txt"));
    expect_same_image(kestrel_run / (std::string(stem) + ".png"), reference_run / (std::string(stem) + ".png"));
  }
}

}  // namespace

TEST(SegmentPredict, RecordedReference) {
  const fs::path dir = scratch("recorded");
  for (const std::string name : {"plain", "retina"}) {
    const CliResult r = run_kestrel(predict_args(dir, name) + (name == "retina" ? " --retina-masks" : ""));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(mentions(r.out, "images/a.png: 96x128 4 0s, 2 32s, ")) << r.out;  // as the reference's line
    EXPECT_TRUE(mentions(r.out, "images/b.png: 128x96 4 0s, 2 32s, ")) << r.out;
    EXPECT_TRUE(mentions(r.out, "YOLOv5n-seg summary: 165 layers, 1986637 parameters")) << r.out;
    EXPECT_TRUE(mentions(r.out, "Results saved to " + (dir / name).string())) << r.out;
    EXPECT_TRUE(mentions(r.out, "2 labels saved to " + (dir / name).string() + "/labels")) << r.out;
    expect_like_reference(dir / name, kFixture / name);
  }
  fs::remove_all(dir);
}

TEST(SegmentPredict, LiveReference) {
  kestrel::testing::Reference ref;
  const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "cv2", "pandas"}, "segment/predict.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  const fs::path dir = scratch("live");
  for (const std::string name : {"plain", "retina"}) {
    const std::string retina = name == "retina" ? " --retina-masks" : "";
    const CliResult r = kestrel::testing::run_reference_python(
        ref, std::string("tests/scripts/segment_predict_reference.py run ") + kWeights + " " +
                 (kFixture / "images").string() + " " + (dir / "reference").string() + " " + name + " 0.000195 128 6" + retina);
    ASSERT_EQ(r.code, 0) << r.out;
    const CliResult k = run_kestrel(predict_args(dir / "kestrel", name) + retina);
    ASSERT_EQ(k.code, 0) << k.out;
    expect_like_reference(dir / "kestrel" / name, dir / "reference" / name);
  }
  fs::remove_all(dir);
}

TEST(SegmentPredict, FlagsShapeTheOutputs) {
  const fs::path dir = scratch("flags");
  const std::string base = std::string("segment predict --weights ") + kWeights + " --source " +
                           (kFixture / "images/a.png").string() + " --img 128 --max-det 6" +
                           " --device cpu --project " + dir.string() + " --exist-ok";
  // --classes keeps one class; --save-crop cuts each box out; --save-txt without --save-conf
  // leaves the confidence out (a class and x y pairs: an odd count of numbers).
  CliResult r = run_kestrel(base + " --name crops --conf-thres 0.000195 --classes 32 --save-crop --save-txt");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "96x128 2 32s, ")) << r.out;
  EXPECT_TRUE(fs::exists(dir / "crops/crops/32/a.jpg"));
  EXPECT_TRUE(fs::exists(dir / "crops/crops/32/a2.jpg"));
  EXPECT_TRUE(fs::exists(dir / "crops/a.png"));
  for (const auto& row : read_rows(dir / "crops/labels/a.txt")) {
    EXPECT_EQ(row[0], 32);
    EXPECT_EQ(row.size() % 2, 1u);
  }
  // --nosave: nothing written, no results line; a high threshold: no detections.
  r = run_kestrel(base + " --name none --nosave --conf-thres 0.5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "96x128 (no detections), ")) << r.out;
  EXPECT_FALSE(mentions(r.out, "Results saved to")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "none/a.png"));
  fs::remove_all(dir);
}

TEST(SegmentPredict, RefusesWhatItCannotRun) {
  const std::string images = (kFixture / "images").string();
  // A detector's weights: named as such, and where they run.
  CliResult r = run_kestrel("segment predict --weights tests/data/yolov5n_coco80.pt --source " + images +
                            " --device cpu --nosave --project " + scratch("refuse").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "a detection model's weights")) << r.out;
  EXPECT_TRUE(mentions(r.out, "kestrel detect")) << r.out;
  // Missing flags and sources.
  r = run_kestrel(std::string("segment predict --weights ") + kWeights);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(mentions(r.out, "--weights and --source are required")) << r.out;
  r = run_kestrel(std::string("segment predict --weights ") + kWeights + " --device cpu --source /nonexistent/x.jpg");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "/nonexistent/x.jpg")) << r.out;
  r = run_kestrel("segment predict --weights /nonexistent/w.pt --device cpu --source " + images);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "no such file")) << r.out;
  // --augment fails in the reference (no prototypes from its augmented forward): refused.
  r = run_kestrel(std::string("segment predict --augment --weights ") + kWeights + " --source " + images);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(mentions(r.out, "--augment")) << r.out;
  fs::remove_all(scratch("refuse"));
}

TEST(SegmentPredict, FamilyRoutesValAndPredict) {
  CliResult r = run_kestrel("segment");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(mentions(r.out, "usage: kestrel segment train|val|predict")) << r.out;
  r = run_kestrel("segment predict --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(mentions(r.out, "--retina-masks")) << r.out;
  r = run_kestrel("segment val --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(mentions(r.out, "runs/val-seg")) << r.out;
  r = run_kestrel("segment train --help");  // tests/yolo/cli/segment_train_test.cpp trains
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(mentions(r.out, "--mask-ratio")) << r.out;
  r = run_kestrel("segment detect");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(mentions(r.out, "unknown subcommand 'detect'")) << r.out;
  EXPECT_TRUE(mentions(run_kestrel("--help").out, "segment")) << "the overview lists the family";
}
