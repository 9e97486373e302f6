// `kestrel val` and `kestrel detect` end to end on the synthetic dataset with freshly initialised
// weights: they run, print the reference's table / per-image lines, write their outputs, and
// refuse bad input with the documented exit codes.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <vector>

#include "io/json.h"
#include "kernels/bf16_operands.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/common/run_dir_lock.h"
#include "yolo/model/model.h"
#include "yolo/model/model_config.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

namespace fs = std::filesystem;

namespace {

using Result = kestrel::testing::CliResult;
Result run(const std::string& args) { return kestrel::testing::run_kestrel(args); }

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_cli_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST(ValDetectCommands, RunOnTheSyntheticDataset) {
  const fs::path dir = scratch("valdetect");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 4 --save " + weights).code, 0);

  Result val = run("val --weights " + weights + " --cfg models/yolov5n.yaml --data synthetic --img-size 64"
                   " --batch-size 16 --device cpu --workers 1 --save-json --save-txt --project " + (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  EXPECT_NE(val.out.find("Class     Images  Instances          P          R      mAP50   mAP50-95"), std::string::npos) << val.out;
  EXPECT_NE(val.out.find("all        100"), std::string::npos) << val.out;
  EXPECT_NE(val.out.find("Speed: "), std::string::npos);
  for (const char* f : {"val/exp/predictions.json", "val/exp/confusion_matrix.png", "val/exp/val_batch0_labels.jpg",
                        "val/exp/val_batch0_pred.jpg"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  // predictions.json as the reference's save_one_json: numeric stems as integer ids, x y w h
  // rounded to 3 digits, the score to 5.
  std::ifstream json_file(dir / "val/exp/predictions.json");
  std::stringstream json_text;
  json_text << json_file.rdbuf();
  const kestrel::json::Value rows = kestrel::json::parse(json_text.str());
  ASSERT_TRUE(rows.is_array());
  ASSERT_FALSE(rows.as_array().empty()) << json_text.str().substr(0, 200);
  for (const kestrel::json::Value& row : rows.as_array()) {
    ASSERT_TRUE(row.find("image_id") && row.find("category_id") && row.find("bbox") && row.find("score"));
    EXPECT_TRUE(row.find("category_id")->is_integer());
    const auto& bbox = row.find("bbox")->as_array();
    ASSERT_EQ(bbox.size(), 4u);
    for (const auto& v : bbox) EXPECT_EQ(v.as_real(), std::round(v.as_real() * 1000) / 1000);
    const double score = row.find("score")->as_real();
    EXPECT_GT(score, 0.0);
    EXPECT_EQ(score, std::round(score * 1e5) / 1e5);
  }

  // Two synthetic validation images as the source.
  const fs::path images = dir / "images";
  fs::create_directories(images);
  int copied = 0;
  const std::string home = std::getenv("XDG_CACHE_HOME") ? std::getenv("XDG_CACHE_HOME") : std::string(std::getenv("HOME")) + "/.cache";
  for (const auto& e : fs::directory_iterator(home + "/kestrel/synthetic-v1/images/val"))
    if (copied < 2) fs::copy_file(e.path(), images / e.path().filename()), ++copied;
  Result det = run("detect --weights " + weights + " --cfg models/yolov5n.yaml --nc 4 --source " + images.string() +
                   " --img-size 64 --device cpu --conf-thres 0.0001 --save-txt --project " + (dir / "det").string());
  ASSERT_EQ(det.code, 0) << det.out;
  EXPECT_NE(det.out.find("image 1/2 "), std::string::npos) << det.out;
  EXPECT_NE(det.out.find("image 2/2 "), std::string::npos) << det.out;
  size_t outputs = 0;
  for (const auto& e : fs::directory_iterator(dir / "det/exp")) outputs += e.is_regular_file();
  EXPECT_EQ(outputs, 2u);
  EXPECT_TRUE(fs::exists(dir / "det/exp/labels"));
}

// --save-txt writes "class x y w h" per box, as the reference's val.py; --save-conf adds the
// confidence. A fresh model's confidences are tiny: a tiny threshold keeps some boxes.
// --half on the CPU: bfloat16 inference where the CPU has bfloat16 arithmetic (its mAP within
// rounding of float32's), float32 with a note elsewhere and with --augment.
TEST(ValDetectCommands, HalfOnTheCpu) {
  const fs::path dir = scratch("valhalf");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 4 --save " + weights).code, 0);
  const std::string val = "val --weights " + weights + " --cfg models/yolov5n.yaml --data synthetic --img-size 64"
                          " --batch-size 16 --device cpu --workers 1 --project " + (dir / "val").string();
  const Result half = run(val + " --half");
  ASSERT_EQ(half.code, 0) << half.out;
  if (kestrel::kernels::cpu_bf16_support().native()) {
    EXPECT_NE(half.out.find("--half: bfloat16 inference on the CPU"), std::string::npos) << half.out;
  } else {
    EXPECT_NE(half.out.find("which this one lacks (float32 inference)"), std::string::npos) << half.out;
  }
  EXPECT_NE(half.out.find("all        100"), std::string::npos) << half.out;
  const Result tta = run(val + " --half --augment");
  ASSERT_EQ(tta.code, 0) << tta.out;
  if (kestrel::kernels::cpu_bf16_support().native())
    EXPECT_NE(tta.out.find("--half with --augment on the CPU: float32 inference"), std::string::npos) << tta.out;
}

TEST(ValDetectCommands, SaveTxtWritesConfidencesOnlyWithSaveConf) {
  const fs::path dir = scratch("valtxt");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 4 --save " + weights).code, 0);
  for (const bool conf : {false, true}) {
    const std::string name = conf ? "conf" : "plain";
    Result val = run("val --weights " + weights + " --cfg models/yolov5n.yaml --data synthetic --img-size 64 --batch-size 16 --device cpu "
                     "--workers 1 --conf-thres 1e-9 --max-det 3 --save-txt" + std::string(conf ? " --save-conf" : "") +
                     " --project " + dir.string() + " --name " + name);
    ASSERT_EQ(val.code, 0) << val.out;
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir / name / "labels")) {
      std::ifstream in(e.path());
      std::string line;
      ASSERT_TRUE(std::getline(in, line)) << e.path();
      std::istringstream fields(line);
      std::vector<double> values;
      for (double v; fields >> v;) values.push_back(v);
      ASSERT_EQ(values.size(), conf ? 6u : 5u) << e.path() << ": " << line;
      for (size_t k = 1; k < 5; ++k) EXPECT_TRUE(values[k] >= 0 && values[k] <= 1) << line;
      if (conf) {
        EXPECT_TRUE(values[5] > 0 && values[5] < 1) << line;
      }
      ++files;
    }
    EXPECT_EQ(files, 100u) << name;
  }
}

TEST(ValDetectCommands, BadInputIsRefused) {
  EXPECT_EQ(run("val").code, 2);                                  // --weights missing
  EXPECT_EQ(run("val --weights x --task bench").code, 2);         // bad --task
  EXPECT_EQ(run("val --weights /no/such.safetensors --data synthetic --cfg models/yolov5n.yaml").code, 1);
  EXPECT_EQ(run("detect --weights w").code, 2);                   // --source missing
  const fs::path dir = scratch("bad");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --save " + weights).code, 0);
  Result r = run("detect --weights " + weights + " --source /no/such/dir");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("plain weights file"), std::string::npos) << r.out;  // needs --cfg
  r = run("val --weights " + weights + " --cfg models/yolov5n.yaml --data synthetic --device cpu");
  EXPECT_EQ(r.code, 1);  // 80-class weights against the 4-class dataset
  EXPECT_NE(r.out.find("do not fit this model"), std::string::npos) << r.out;
  r = run("detect --weights " + weights + " --cfg models/yolov5n.yaml --source /no/such/dir --tf32 maybe");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--tf32: on or off, got 'maybe'"), std::string::npos) << r.out;
}

// `--data coco128.yaml` by bare name finds the shipped yaml from any directory, as `--cfg` finds the
// models; without the images, the dataset is fetched (here from the tests' dead loopback mirror,
// tests/support/test_main.cpp), and the error says where it comes from and where it goes.
TEST(ValDetectCommands, ShippedDatasetYamlByName) {
  const fs::path dir = scratch("shipped_data");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --save " + weights).code, 0);
  const Result r = kestrel::testing::run_kestrel_in(dir, "val --weights w.safetensors --data coco128.yaml "
                                                         "--cfg yolov5n.yaml --device cpu");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("Dataset not found, missing paths"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fetch https://ultralytics.com/assets/coco128.zip by hand and unpack it into " +
                       (dir.parent_path() / "datasets").string()),
            std::string::npos)
      << r.out;
  const Result missing = kestrel::testing::run_kestrel_in(dir, "val --weights w.safetensors --data nosuch.yaml "
                                                               "--cfg yolov5n.yaml --device cpu");
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_NE(missing.out.find("--data"), std::string::npos) << missing.out;
}

// An image size no model can run at is a usage error naming the limit, before any weights are read.
TEST(ValDetectCommands, ImageSizesAboveTheLimitAreRefused) {
  Result r = run("val --weights w.safetensors --data synthetic --img-size 1000000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--img-size 1000000 is above the limit of 8192 pixels a side"), std::string::npos)
      << r.out;
  r = run("detect --weights w.safetensors --source x.jpg --img-size 640 9000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--img-size 640 9000 is above the limit of 8192"), std::string::npos) << r.out;
}

namespace {

// The printed table, less the timing in its progress bar and the Speed line.
std::string table_of(const std::string& out) {
  std::istringstream in(out);
  std::string table;
  for (std::string line; std::getline(in, line);)
    if (line.find("Speed:") == std::string::npos && line.find("it/s") == std::string::npos &&
        line.find("Results saved") == std::string::npos)
      table += line.substr(0, line.find(": ")) + "\n";
  return table;
}

std::string file_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// A reference .pt (tests/data/yolov5n_synthetic.pt, made by YOLOv5 v7.0) serves val and detect
// with no --cfg, and gives exactly what the same weights give as safetensors (what
// scripts/convert_ultralytics.py --half writes: float16 weights, model yaml, nc and names).
TEST(ValDetectCommands, APtGivesWhatItsSafetensorsGive) {
  const fs::path dir = scratch("pt");
  const std::string pt = "tests/data/yolov5n_synthetic.pt";
  const kestrel::SafetensorsFile f = kestrel::yolo::read_weights_file(pt);
  kestrel::yolo::DetectionModel model(kestrel::yolo::parse_model_config(f.metadata().at("model_yaml"), pt), 4, 0);
  kestrel::yolo::load_inference_weights(model, pt);
  const std::string st = (dir / "w.safetensors").string();
  kestrel::yolo::save_weights(model, st, kestrel::DType::F16,
                              {{"model_yaml", f.metadata().at("model_yaml")}, {"nc", "4"},
                               {"names", f.metadata().at("names")},
                               {"model_yaml_file", f.metadata().at("model_yaml_file")}});
  std::map<std::string, Result> val;
  for (const std::string& w : {pt, st}) {
    const std::string name = w == pt ? "pt" : "st";
    val[name] = run("val --weights " + w + " --data synthetic --img-size 64 --batch-size 16 --device cpu --workers 1"
                    " --conf-thres 0.0001 --save-json --project " + dir.string() + " --name val_" + name);
    ASSERT_EQ(val[name].code, 0) << val[name].out;
    Result det = run("detect --weights " + w + " --source " + (dir / ("val_" + name) / "val_batch0_labels.jpg").string() +
                     " --img-size 64 --device cpu --conf-thres 0.0001 --save-txt --save-conf --project " + dir.string() +
                     " --name det_" + name);
    ASSERT_EQ(det.code, 0) << det.out;
  }
  EXPECT_NE(val["pt"].out.find("circle"), std::string::npos) << val["pt"].out;  // names from the .pt
  EXPECT_EQ(table_of(val["pt"].out), table_of(val["st"].out));
  const std::string json = file_text(dir / "val_pt" / "predictions.json");
  EXPECT_GT(json.size(), 100u);
  EXPECT_EQ(json, file_text(dir / "val_st" / "predictions.json"));
  const std::string labels = file_text(dir / "det_pt" / "labels" / "val_batch0_labels.txt");
  EXPECT_FALSE(labels.empty());
  EXPECT_EQ(labels, file_text(dir / "det_st" / "labels" / "val_batch0_labels.txt"));
}

// A val or detect run that fails at start-up (weights, data, source, a model that does not fit)
// leaves no empty project/name directory behind: the directory is made once everything it
// needs has been found.
// Two runs into one --exist-ok folder (issue 42): val and detect hold the run directory as train
// does, so the second is refused naming the first, and a finished run leaves no lock file.
TEST(ValDetectCommands, TwoRunsIntoOneFolderAreRefusedAndNoLockFileStays) {
  const fs::path dir = scratch("one_folder");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 4 --save " + weights).code, 0);
  const std::string val = "val --weights " + weights + " --cfg models/yolov5n.yaml --data synthetic --img-size 64 "
                          "--batch-size 16 --device cpu --workers 1 --exist-ok --project " + (dir / "val").string();
  fs::create_directories(dir / "val/exp");
  {
    const kestrel::yolo::RunDirLock held = kestrel::yolo::RunDirLock::acquire((dir / "val/exp").string(), "unused");
    const Result second = run(val);
    EXPECT_EQ(second.code, 1) << second.out;
    EXPECT_NE(second.out.find("is in use by another run (pid " + std::to_string(::getpid())), std::string::npos)
        << second.out;
  }
  const Result alone = run(val);
  ASSERT_EQ(alone.code, 0) << alone.out;
  EXPECT_FALSE(fs::exists(dir / "val/exp" / kestrel::yolo::RunDirLock::kFileName));
  const Result det = run("detect --weights " + weights + " --cfg models/yolov5n.yaml --nc 4 --source " +
                         (dir / "none").string() + " --device cpu --project " + (dir / "det").string());
  EXPECT_FALSE(fs::exists(dir / "det/exp" / kestrel::yolo::RunDirLock::kFileName)) << det.out;
  fs::remove_all(dir);
}

TEST(ValDetectCommands, StartUpFailuresLeaveNoRunDirectory) {
  const fs::path dir = scratch("startup_failures");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --save " + weights).code, 0);
  const std::string project = " --device cpu --project " + (dir / "runs").string();
  const std::vector<std::string> failing = {
      "val --weights /no/such.safetensors --cfg yolov5n.yaml --data synthetic",
      "val --weights " + weights + " --cfg yolov5n.yaml --data no_such_dataset.yaml",
      "val --weights " + weights + " --cfg yolov5n.yaml --data synthetic",  // 80 classes, 4 in the data
      "val --weights " + weights + " --cfg yolov5n.yaml --nc 4 --data synthetic --task test",  // no test split
      "detect --weights /no/such.safetensors --cfg yolov5n.yaml --source " + dir.string(),
      "detect --weights " + weights + " --cfg yolov5n.yaml --source /no/such/dir",
      "detect --weights " + weights + " --source " + dir.string(),  // plain weights without --cfg
  };
  for (const std::string& command : failing) {
    const Result r = run(command + project);
    EXPECT_EQ(r.code, 1) << command << "\n" << r.out;
    EXPECT_FALSE(fs::exists(dir / "runs" / "exp")) << command << "\n" << r.out;
  }
  fs::remove_all(dir);
}
