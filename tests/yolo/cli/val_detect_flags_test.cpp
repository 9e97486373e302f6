// The reference's val/detect flags beyond the basics, end to end through the CLI: .onnx weights
// (exported by `kestrel export`) detect as the safetensors they came from and validate as the
// reference validates non-PyTorch weights; --half's note on the CPU; --augment; --dnn accepted;
// detect --data's class names and --visualize's feature maps.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/support/cli.h"
#include "yolo/data/synthetic.h"

namespace fs = std::filesystem;

namespace {

using kestrel::testing::CliResult;
CliResult run(const std::string& args) { return kestrel::testing::run_kestrel(args); }

bool mentions(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_val_detect_flags_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

const char* kWeights = "tests/data/yolov5n_coco128_320.safetensors";

// A small dataset of the first `n` synthetic validation images (256x256, square) and their labels:
// dir/images, dir/labels, dir/mini.yaml. Returns the images folder.
fs::path mini_dataset(const fs::path& dir, int n) {
  const fs::path synthetic = fs::path(kestrel::yolo::data::ensure_synthetic_dataset(kestrel::yolo::data::default_synthetic_dir())).parent_path();
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "labels");
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(synthetic / "images" / "val")) all.push_back(e.path());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < n && i < static_cast<int>(all.size()); ++i) {
    fs::copy_file(all[i], dir / "images" / all[i].filename());
    const fs::path label = synthetic / "labels" / "val" / all[i].filename().replace_extension(".txt");
    if (fs::exists(label)) fs::copy_file(label, dir / "labels" / label.filename());
  }
  std::ofstream(dir / "mini.yaml") << "path: " << dir.string() << "\ntrain: images\nval: images\n"
                                   << "names: [circle, rectangle, triangle, cross]\n";
  return dir / "images";
}

// The rows of a --save-txt --save-conf label file: class, x, y, w, h, conf.
std::vector<std::vector<double>> label_rows(const fs::path& file) {
  std::vector<std::vector<double>> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<double> row(6);
    for (double& v : row) words >> v;
    rows.push_back(row);
  }
  return rows;
}

// Every row of `a` has a row of `b` of the same class within `tol` in each value (rows may swap
// places where confidences tie to the printed digits).
void expect_same_rows(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& row : a) {
    bool found = false;
    for (const auto& other : b) {
      bool same = row[0] == other[0];
      for (int k = 1; k < 6 && same; ++k) same = std::abs(row[k] - other[k]) <= tol * std::max(1.0, std::abs(row[k]));
      found = found || same;
    }
    EXPECT_TRUE(found) << "no match for a row of class " << row[0] << " at " << row[1] << ", " << row[2];
  }
}

}  // namespace

TEST(ValDetectFlags, OnnxWeightsDetectAndValidateAsTheirSafetensors) {
  const fs::path dir = scratch("onnx");
  const fs::path images = mini_dataset(dir, 2);
  const std::string st = (dir / "m.safetensors").string(), onnx = (dir / "m.onnx").string();
  fs::copy_file(kWeights, st);
  const CliResult exported = run("export --weights " + st + " --img 128");
  ASSERT_EQ(exported.code, 0) << exported.out;

  // Square images: the ONNX path's full padding and the minimal one give the same 128x128 input.
  for (const std::string& w : {st, onnx}) {
    const CliResult r = run("detect --weights " + w + " --source " + images.string() + " --img 128 --conf 0.001 "
                            "--save-txt --save-conf --nosave --dnn --device cpu --project " + dir.string() + " --name " +
                            fs::path(w).extension().string().substr(1));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(mentions(r.out, "image 1/2 ")) << r.out;
  }
  int compared = 0;
  for (const auto& e : fs::directory_iterator(dir / "safetensors" / "labels")) {
    const auto a = label_rows(e.path()), b = label_rows(dir / "onnx" / "labels" / e.path().filename());
    expect_same_rows(a, b, 2e-4);
    compared += static_cast<int>(a.size());
  }
  EXPECT_GT(compared, 5);

  // val: square letterboxed batches of one, as the reference validates weights other than PyTorch's;
  // a fixed-size export runs at its own size, saying so.
  const CliResult val = run("val --weights " + onnx + " --data " + (dir / "mini.yaml").string() +
                            " --single-cls --img 320 --batch 16 --device cpu --workers 1 "
                            "--half --project " + (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  EXPECT_TRUE(mentions(val.out, "is a fixed-size export for 128x128 images: validating at 128, not --img-size 320"))
      << val.out;
  EXPECT_TRUE(mentions(val.out, "Forcing --batch-size 1 square inference (1,3,128,128) for non-PyTorch models")) << val.out;
  EXPECT_TRUE(mentions(val.out, "WARNING: --half is ignored for ONNX weights")) << val.out;
  EXPECT_TRUE(mentions(val.out, "all          2")) << val.out;

  // Training and export start from the weights, not from the graph.
  const CliResult again = run("export --weights " + onnx);
  EXPECT_EQ(again.code, 1);
  EXPECT_TRUE(mentions(again.out, "is an ONNX model: `kestrel val` and `kestrel detect` run it")) << again.out;
  fs::remove_all(dir);
}

TEST(ValDetectFlags, HalfIsANoteOnTheCpuAndAugmentRuns) {
  const fs::path dir = scratch("half");
  const fs::path images = mini_dataset(dir, 2);
  const CliResult val = run("val --weights " + std::string(kWeights) + " --data " + (dir / "mini.yaml").string() +
                            " --single-cls --img 64 --batch 50 "
                            "--device cpu --workers 1 --half --augment --project " + (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  // bfloat16 inference on the CPU leaves the augmentation out (and CPUs without bfloat16 arithmetic
  // stay float32): either way a note and float32.
  EXPECT_TRUE(mentions(val.out, "WARNING: --half ") && mentions(val.out, "float32 inference")) << val.out;
  EXPECT_TRUE(mentions(val.out, "all          2")) << val.out;
  const CliResult det = run("detect --weights " + std::string(kWeights) + " --source " + images.string() +
                            " --img 128 --conf 0.001 --device cpu --half --augment --project " + (dir / "det").string());
  ASSERT_EQ(det.code, 0) << det.out;
  EXPECT_TRUE(mentions(det.out, "WARNING: --half ") && mentions(det.out, "float32 inference")) << det.out;
  EXPECT_TRUE(mentions(det.out, "image 2/2 ")) << det.out;
  fs::remove_all(dir);
}

// The reference's --save-hybrid (val) and --update (detect) are accepted, each with a note of what
// Kestrel does instead: val saves the predictions as --save-txt, detect rewrites nothing.
TEST(ValDetectFlags, SaveHybridAndUpdateAreNotes) {
  const fs::path dir = scratch("hybrid");
  const fs::path images = mini_dataset(dir, 2);
  const CliResult val = run("val --weights " + std::string(kWeights) + " --data " + (dir / "mini.yaml").string() +
                            " --single-cls --img 64 --device cpu --workers 1 --save-hybrid --project " +
                            (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  EXPECT_TRUE(mentions(val.out, "--save-hybrid: Kestrel does not add the labels")) << val.out;
  EXPECT_TRUE(fs::is_directory(dir / "val" / "exp" / "labels")) << "--save-hybrid saves as --save-txt";
  const auto before = fs::last_write_time(kWeights);
  const CliResult det = run("detect --weights " + std::string(kWeights) + " --source " + images.string() +
                            " --img 64 --device cpu --update --project " + (dir / "det").string());
  ASSERT_EQ(det.code, 0) << det.out;
  EXPECT_TRUE(mentions(det.out, "--update: Kestrel reads weights files as they are")) << det.out;
  EXPECT_EQ(fs::last_write_time(kWeights), before);
  fs::remove_all(dir);
}

// --data names the classes of weights that carry none; --visualize writes every stage but Detect.
TEST(ValDetectFlags, DetectDataNamesAndVisualize) {
  const fs::path dir = scratch("visualize");
  const fs::path images = mini_dataset(dir, 1);
  const std::string plain = (dir / "plain.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 3 --save " + plain).code, 0);
  std::ofstream(dir / "birds.yaml") << "path: .\ntrain: images\nval: images\nnames: [heron, kestrel, owl]\n";
  const CliResult r = run("detect --weights " + plain + " --cfg yolov5n.yaml --data " + (dir / "birds.yaml").string() +
                          " --source " + images.string() + " --img 64 --conf 0.0001 --visualize --device cpu "
                          "--project " + dir.string() + " --name det");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "heron") || mentions(r.out, "kestrel") || mentions(r.out, "owl")) << r.out;
  EXPECT_TRUE(mentions(r.out, "Saving ")) << r.out;
  const fs::path stages = dir / "det" / fs::directory_iterator(images)->path().stem();
  ASSERT_TRUE(fs::is_directory(stages)) << stages;
  int png = 0, npy = 0;
  for (const auto& e : fs::directory_iterator(stages)) {
    png += e.path().extension() == ".png";
    npy += e.path().extension() == ".npy";
  }
  // yolov5n's 24 stages before Detect, all at least 2x2 at 64 pixels (stride 32).
  EXPECT_EQ(png, 24);
  EXPECT_EQ(npy, 24);
  EXPECT_TRUE(fs::exists(stages / "stage0_Conv_features.png"));
  EXPECT_TRUE(fs::exists(stages / "stage9_SPPF_features.npy"));
  EXPECT_TRUE(fs::exists(stages / "stage11_Upsample_features.png"));
  // stage 0: 16 channels of 32x32, float32, after a 128-byte header.
  EXPECT_EQ(fs::file_size(stages / "stage0_Conv_features.npy"), 128u + 16u * 32 * 32 * 4);

  // Names for another class count than the weights predict are refused.
  std::ofstream(dir / "two.yaml") << "path: .\ntrain: images\nval: images\nnames: [a, b]\n";
  const CliResult bad = run("detect --weights " + plain + " --cfg yolov5n.yaml --nc 3 --data " +
                            (dir / "two.yaml").string() + " --source " + images.string() + " --img 64 --device cpu "
                            "--project " + dir.string());
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(mentions(bad.out, "names 2 classes, but the weights predict 3")) << bad.out;
  fs::remove_all(dir);
}

// val.py --task speed: every --weights validated with the reference's thresholds (conf 0.25, IoU
// 0.45), no plots, each in a run directory of its own; several weights are refused elsewhere.
TEST(ValDetectFlags, TaskSpeedRunsEachWeights) {
  const fs::path dir = scratch("speed");
  mini_dataset(dir, 2);
  const std::string data = (dir / "mini.yaml").string();
  const CliResult r = run("val --task speed --weights " + std::string(kWeights) + " " + kWeights + " --data " + data +
                          " --single-cls --img 64 --device cpu --workers 1 --project " + (dir / "val").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "conf_thres=0.001")) << "the echo shows the flags as given: " << r.out;
  size_t speeds = 0;
  for (size_t at = r.out.find("Speed: "); at != std::string::npos; at = r.out.find("Speed: ", at + 1)) ++speeds;
  EXPECT_EQ(speeds, 2u) << r.out;
  EXPECT_TRUE(fs::is_directory(dir / "val" / "exp2"));
  EXPECT_FALSE(fs::exists(dir / "val" / "exp" / "confusion_matrix.png")) << "no plots";
  const CliResult two = run("val --weights " + std::string(kWeights) + " " + kWeights + " --data " + data + " --img 64");
  EXPECT_EQ(two.code, 2) << two.out;
  fs::remove_all(dir);
}
