// The reference's start-up lines, in its order: train's options echo ("train: weights=..."), its
// hyperparameters, the model table and summary before the weights are transferred; val's, detect's
// and export's echo, then "Fusing layers... " and the fused model's summary. Piped output is plain
// text; on a terminal the prefixes are blue and bold, as the reference's colorstr.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;

namespace {

using kestrel::testing::run_kestrel;

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_startup_lines_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Where `text` starts in `out`, npos when absent.
size_t at(const std::string& out, const std::string& text) { return out.find(text); }

}  // namespace

// The run is stopped at the end of its start-up (--freeze 25 freezes every layer, which is refused
// once the weights are in): everything up to there is printed, and no epoch is spent.
TEST(StartupLines, TrainEchoesOptionsHyperparametersAndTheModelTable) {
  const fs::path project = scratch("train");
  const auto r = run_kestrel(
      "train --weights tests/data/yolov5n_synthetic.pt --data synthetic --epochs 1 --img 64 --batch-size 4 "
      "--device cpu --workers 1 --noplots --no-tensorboard --noautoanchor --freeze 25 --project " +
      project.string());
  ASSERT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--freeze 25 freezes every layer"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(project / "exp")) << "a start-up failure leaves no run directory";
  EXPECT_EQ(r.out.rfind("train: weights=tests/data/yolov5n_synthetic.pt, cfg=, data=synthetic, hyp=, epochs=1, "
                        "batch_size=4, imgsz=64, rect=False, resume=False, nosave=False, noval=False, ",
                        0),
            0u)
      << r.out;
  const size_t hyp = at(r.out, "\nhyperparameters: lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, "
                               "warmup_epochs=3.0, ");
  const size_t table = at(r.out, "\n                 from  n    params  module                                  arguments");
  const size_t first_row = at(r.out, "\n  0                -1  1      1760  models.common.Conv                      [3, 16, 6, 2, 2]");
  const size_t summary = at(r.out, " summary: 214 layers, ");
  const size_t transferred = at(r.out, "Transferred 349/349 items");
  ASSERT_NE(hyp, std::string::npos) << r.out;
  ASSERT_NE(table, std::string::npos) << r.out;
  ASSERT_NE(summary, std::string::npos) << r.out;
  EXPECT_LT(hyp, table);
  EXPECT_LT(table, first_row);
  EXPECT_LT(first_row, summary);
  EXPECT_LT(summary, transferred);
  EXPECT_EQ(r.out.find(" summary: 214 layers", summary + 1), std::string::npos) << "one summary: " << r.out;
  // As the reference's Model(ckpt['model'].yaml): a model built from the weights' yaml dict is "Model".
  EXPECT_NE(r.out.find("\nModel summary: 214 layers, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[128, 128, 1, False]"), std::string::npos) << "Python's spelling: " << r.out;
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "piped output is plain text";
  fs::remove_all(project);
}

// train.py's order after the model: the optimizer, the train loader's scan, the val loader's, then
// AutoAnchor (which needs the loader's labels) and the labels plot, then the sizes and the start;
// at the end the epochs' time before the best weights' validation, then where the results are.
TEST(StartupLines, TrainSaysTheLoadersAndAutoAnchorInTheReferencesOrder) {
  const fs::path dir = scratch("order");
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "labels");
  for (int i = 0; i < 4; ++i) {  // four grey images with a box each: the final validation is quick
    const std::string name = "im" + std::to_string(i);
    kestrel::yolo::data::write_png((dir / "images" / (name + ".png")).string(),
                                   cv::Mat(64, 64, CV_8UC3, cv::Scalar(114, 114, 114)));
    std::ofstream((dir / "labels" / (name + ".txt")).string()) << "0 0.5 0.5 0.4 0.3\n";
  }
  std::ofstream(dir / "four.yaml") << "path: " << dir.string() << "\ntrain: images\nval: images\nnames: ['box']\n";
  const auto r = run_kestrel("train --cfg models/yolov5n.yaml --data " + (dir / "four.yaml").string() +
                             " --epochs 1 --img 64 --batch-size 4 --device cpu --workers 1 --no-tensorboard "
                             "--nosave --project " + (dir / "runs").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<std::string> order = {" summary: 214 layers", "optimizer: SGD", "train: Scanning",
                                          "val: Scanning", "AutoAnchor: ", "Plotting labels to ",
                                          "Image sizes 64 train", "Starting training for 1 epochs",
                                          "1 epoch completed in", "Validating ", "Results saved to "};
  size_t last = 0;
  for (const std::string& line : order) {
    const size_t here = at(r.out, line);
    ASSERT_NE(here, std::string::npos) << "no '" << line << "' in: " << r.out;
    EXPECT_GT(here, last) << "'" << line << "' is out of order: " << r.out;
    last = here;
  }
  EXPECT_EQ(r.out.find("train: Scanning", at(r.out, "train: Scanning") + 1), std::string::npos) << "said once: " << r.out;
  fs::remove_all(dir);
}

TEST(StartupLines, ValDetectAndExportEchoTheirFlagsThenTheFusedModel) {
  const fs::path dir = scratch("inference");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run_kestrel("model --cfg models/yolov5n.yaml --nc 4 --save " + weights).code, 0);
  const std::string fused = "Fusing layers... \nYOLOv5n summary: 157 layers, ";

  auto r = run_kestrel("val --weights " + weights + " --cfg yolov5n.yaml --nc 4 --data synthetic --img 64 --conf 0.9 "
                       "--device cpu --workers 1 --project " + (dir / "val").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("val: data=synthetic, weights=" + weights + ", batch_size=32, imgsz=64, conf_thres=0.9, "
                        "iou_thres=0.6, max_det=300, task=val, device=cpu, workers=1, single_cls=False, ",
                        0),
            0u)
      << r.out;
  ASSERT_NE(at(r.out, fused), std::string::npos) << r.out;
  EXPECT_NE(at(r.out, " parameters, 0 gradients, "), std::string::npos) << r.out;
  EXPECT_LT(at(r.out, fused), at(r.out, "val: Scanning")) << r.out;

  fs::create_directories(dir / "images");
  kestrel::yolo::data::write_png((dir / "images" / "grey.png").string(), cv::Mat(64, 64, CV_8UC3, cv::Scalar(114, 114, 114)));
  r = run_kestrel("detect --weights " + weights + " --cfg yolov5n.yaml --nc 4 --source " + (dir / "images").string() +
                  " --device cpu --classes 0 2 --project " + (dir / "detect").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("detect: weights=" + weights + ", source=" + (dir / "images").string() +
                        ", data=coco128.yaml, imgsz=[640, 640], conf_thres=0.25, iou_thres=0.45, max_det=1000, device=cpu, ",
                        0),
            0u)
      << r.out;
  EXPECT_NE(at(r.out, "classes=[0, 2], agnostic_nms=False"), std::string::npos) << r.out;

  r = run_kestrel("export --weights " + weights + " --cfg yolov5n.yaml --nc 4 --img 64");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("export: data=data/coco128.yaml, weights=" + weights + ", imgsz=[64, 64], batch_size=1, device=cpu, ", 0),
            0u)
      << r.out;
  EXPECT_NE(at(r.out, fused), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// On a terminal (a pseudo-terminal from script(1)) the prefixes are coloured as colorstr colours them.
TEST(StartupLines, PrefixesAreColouredOnATerminalOnly) {
  if (kestrel::testing::run_command("command -v script").code != 0) GTEST_SKIP() << "no script(1) for a pseudo-terminal";
  const std::string cmd = kestrel::testing::kestrel_binary().string() + " export --weights /no/such.safetensors";
  const auto r = kestrel::testing::run_command("script -qec '" + cmd + "' /dev/null");
  EXPECT_NE(r.out.find("\x1b[34m\x1b[1mexport: \x1b[0mdata=data/coco128.yaml, weights=/no/such.safetensors"),
            std::string::npos)
      << r.out;
  const auto piped = kestrel::testing::run_command(cmd);
  EXPECT_NE(piped.out.find("export: data=data/coco128.yaml, weights=/no/such.safetensors"), std::string::npos)
      << piped.out;
  EXPECT_EQ(piped.out.find("\x1b["), std::string::npos) << piped.out;
}

// `kestrel --version` and the start-up line after a command's options, as the reference's
// "YOLOv5 🚀 v7.0-... torch-... CPU": the version, the commit, and the device.
TEST(StartupLines, VersionAndTheDeviceLine) {
  auto r = run_kestrel("--version");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("kestrel 0.", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" (commit "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("built with CUDA "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", oneDNN "), std::string::npos) << r.out;
  r = run_kestrel("val --weights /no/such.pt --device cpu");
  const size_t echo = r.out.find("val: "), line = r.out.find("Kestrel 🚀 0.");
  ASSERT_NE(line, std::string::npos) << r.out;
  EXPECT_LT(echo, line) << r.out;
  EXPECT_NE(r.out.find(" CPU (", line), std::string::npos) << r.out;
}
