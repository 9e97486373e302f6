// `kestrel classify train|val|predict` end to end on a small folder dataset made here: a run from
// a yaml and from a detector's .pt (cut at --cutoff, its kept layers transferred), the run
// directory the reference writes (opt.yaml, results.csv with its columns, weights/last and best,
// train_images.jpg, test_images.jpg, results.png), val and predict on the weights it wrote, and
// the refusals: a detector given to val, a dataset without val/, a bad --optimizer, an unknown
// subcommand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/cli.h"
#include "tests/yolo/cli/classify_folder.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class ClassifyCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_classify_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    // Three classes of flat-coloured images with noise, 6 train and 2 val images each.
    kestrel::testing::make_classify_folder(dir_ / "data", {"blue", "green", "red"}, 6, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string data() const { return (dir_ / "data").string(); }
  std::string project() const { return (dir_ / "runs").string(); }

  fs::path dir_;
};

TEST_F(ClassifyCommand, TrainsFromAYamlAndValidatesAndPredictsWithItsWeights) {
  CliResult r = run_kestrel("classify train --model yolov5n.yaml --data " + data() +
                            " --img 32 --batch 4 --epochs 2 --device cpu --workers 1 --project " + project() +
                            " --name a --seed 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Model summary: 118 layers, 1215843 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer: Adam(lr=0.001) with parameter groups 32 weight(decay=0.0), 33 weight(decay=5e-05), 33 bias"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Starting yolov5n.yaml training on " + data() + " dataset with 3 classes for 2 epochs..."),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("     Epoch   GPU_mem  train_loss    val_loss    top1_acc    top5_acc"), std::string::npos) << r.out;
  const fs::path run = dir_ / "runs" / "a";
  for (const char* f : {"opt.yaml", "results.csv", "results.png", "train_images.jpg", "test_images.jpg",
                        "weights/last.safetensors", "weights/best.safetensors"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  int event_files = 0;  // TensorBoard, as the reference's GenericLogger
  for (const auto& e : fs::directory_iterator(run)) event_files += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(event_files, 1);
  const std::string csv = read_text(run / "results.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "                  epoch,             train/loss,               val/loss,  metrics/accuracy_top1,"
            "  metrics/accuracy_top5,                   lr/0");
  const auto rows = kestrel::testing::read_results_csv(run / "results.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(rows[0][5], 0.001 * (0.5 * 0.99 + 0.01), 1e-9);  // lr after the first epoch's step
  EXPECT_NEAR(rows[1][5], 0.001 * 0.01, 1e-12);
  EXPECT_EQ(rows[1][4], 1.0);  // three classes: every label is in the top five
  const std::string opt = read_text(run / "opt.yaml");
  EXPECT_EQ(opt.substr(0, opt.find('\n')), "model: yolov5n.yaml");
  EXPECT_NE(opt.find("\noptimizer: Adam\nlr0: 0.001\ndecay: 5e-05\nlabel_smoothing: 0.1\ncutoff: null\n"), std::string::npos) << opt;

  const std::string best = (run / "weights" / "best.safetensors").string();
  r = run_kestrel("classify val --weights " + best + " --data " + data() + " --img 32 --device cpu --project " +
                  project() + " --name v");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("                     all           6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("                     red           2"), std::string::npos) << r.out;

  r = run_kestrel("classify predict --weights " + best + " --source " + (dir_ / "data" / "val" / "red").string() +
                  " --img 32 --device cpu --save-txt --project " + project() + " --name p");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("image 1/2 "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "runs" / "p" / "0.jpg"));
  const std::string txt = read_text(dir_ / "runs" / "p" / "labels" / "0.txt");
  EXPECT_EQ(std::count(txt.begin(), txt.end(), '\n'), 3) << txt;  // the top five of three classes: three lines
}

TEST_F(ClassifyCommand, CutsADetectorAtTheCutoffAndTakesItsWeights) {
  const CliResult r = run_kestrel("classify train --model tests/data/yolov5n_coco80.pt --data " + data() +
                                  " --img 32 --batch 6 --epochs 1 --device cpu --workers 1 --noplots --optimizer SGD"
                                  " --lr0 0.01 --dropout 0.2 --amp bf16-emulated --project " + project() + " --name d");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("WARNING ⚠️ pass YOLOv5 classifier model with '-cls' suffix"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Model summary: 119 layers, 1215843 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer: SGD(lr=0.01)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("AMP: float32 activations, bfloat16 convolutions (emulated in float32)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "d" / "train_images.jpg"));
}

TEST_F(ClassifyCommand, RefusesWhatCannotWork) {
  // A detector is no classifier.
  CliResult r = run_kestrel("classify val --weights tests/data/yolov5n_coco80.pt --data " + data() +
                            " --img 32 --device cpu --project " + project());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is a detection model"), std::string::npos) << r.out;
  // A dataset without val/.
  fs::remove_all(dir_ / "data" / "val");
  r = run_kestrel("classify train --model yolov5n.yaml --data " + data() + " --img 32 --epochs 1 --project " + project());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("val"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "exp")) << "a run that cannot start leaves no run directory";
  r = run_kestrel("classify train --optimizer Lion --data " + data());
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_kestrel("classify fit");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_kestrel("classify train --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--label-smoothing"), std::string::npos) << r.out;
}

}  // namespace
