// scripts/convert_ultralytics.py and scripts/convert_to_ultralytics.py against the reference
// (YOLOv5 v7.0): a checkpoint made by the reference's own code goes .pt -> safetensors -> .pt with
// every tensor, the class count and the names the same, bit for bit, and the safetensors file runs
// in `kestrel detect` without --cfg, printing the names. A Kestrel training run's stripped best and
// full epoch checkpoint convert to the same .pt weights, which the reference's detect.py loads and
// runs. Needs PyTorch (with PyYAML; the first of $KESTREL_PYTHON, python3, /usr/bin/python3 that
// imports them) and the reference's source tree at $KESTREL_REFERENCE_DIR (default /tmp/yolov5);
// skipped, saying which is missing, without them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support/cli.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_command;
using kestrel::testing::run_kestrel;

namespace {

using kestrel::testing::Reference;

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_converters_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

CliResult python(const Reference& ref, const std::string& script_and_args) {
  return kestrel::testing::run_reference_python(ref, script_and_args);
}

CliResult fixture(const Reference& ref, const std::string& args) {
  return python(ref, "tests/scripts/reference_fixture.py " + args);
}

// A 64x64 JPEG of uniform noise; returns its path.
std::string noise_image(const fs::path& dir) {
  cv::Mat image(64, 64, CV_8UC3);
  cv::randu(image, cv::Scalar::all(0), cv::Scalar::all(255));
  const std::string path = (dir / "noise.jpg").string();
  kestrel::yolo::data::write_jpeg(path, image);
  return path;
}

}  // namespace

TEST(Converters, ReferenceCheckpointRoundTripsBitForBit) {
  Reference ref;
  if (const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml"}, "models/yolo.py"); !missing.empty()) GTEST_SKIP() << missing;
  const fs::path dir = scratch("roundtrip");
  const std::string pt = (dir / "ref.pt").string(), st = (dir / "ref.safetensors").string();
  const std::string back = (dir / "back.pt").string();
  CliResult r = fixture(ref, "make " + pt);
  ASSERT_EQ(r.code, 0) << r.out;
  r = python(ref, "scripts/convert_ultralytics.py " + pt + " " + st + " --yolov5 " + ref.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = fixture(ref, "weights " + pt + " " + st + " ''");  // the EMA, widened to float32 exactly
  EXPECT_EQ(r.code, 0) << r.out;
  r = python(ref, "scripts/convert_to_ultralytics.py " + st + " " + back + " --yolov5 " + ref.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = fixture(ref, "compare " + pt + " " + back);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("compared 349 tensors: 0 differences"), std::string::npos) << r.out;

  // Kestrel reads the converted file with its model yaml and names: no --cfg.
  r = run_kestrel("detect --weights " + st + " --source " + noise_image(dir) + " --img-size 64 --device cpu"
                  " --conf-thres 0.0001 --project " + (dir / "detect").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("64x64 ([0-9]+ (heron|kestrel|owl)s?, )+")))
      << "no class name in the output:\n" << r.out;
}

TEST(Converters, KestrelCheckpointsConvertForTheReference) {
  Reference ref;
  if (const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml"}, "models/yolo.py"); !missing.empty()) GTEST_SKIP() << missing;
  const fs::path dir = scratch("kestrel");
  CliResult r = run_kestrel("train --cfg models/yolov5n.yaml --device cpu --img-size 64 --batch-size 4 --epochs 1"
                            " --workers 1 --max-batches 1 --noplots --save-period 1 --project " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path weights = dir / "exp/weights";
  const std::string best = (weights / "best.safetensors").string(), full = (weights / "epoch0.safetensors").string();
  const std::string best_pt = (dir / "best.pt").string(), full_pt = (dir / "full.pt").string();
  r = python(ref, "scripts/convert_to_ultralytics.py " + best + " " + best_pt + " --yolov5 " + ref.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = python(ref, "scripts/convert_to_ultralytics.py " + full + " " + full_pt + " --yolov5 " + ref.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = fixture(ref, "weights " + best_pt + " " + best + " model.");  // the stripped file's float16, as they are
  EXPECT_EQ(r.code, 0) << r.out;
  r = fixture(ref, "compare " + best_pt + " " + full_pt);  // the full checkpoint's EMA, rounded alike
  EXPECT_EQ(r.code, 0) << r.out;

  r = python(ref, ref.dir + "/detect.py --weights " + best_pt + " --source " + noise_image(dir) +
                      " --imgsz 64 --device cpu --conf-thres 0.0001 --project " + (dir / "reference").string());
  if (r.code != 0 && r.out.find("No module named") != std::string::npos)
    GTEST_SKIP() << "the reference's detect.py lacks a Python package:\n" << r.out;
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("image 1/1 "), std::string::npos) << r.out;

  // Plain weights carry no model: the converter asks for --cfg.
  const std::string plain = (dir / "plain.safetensors").string();
  ASSERT_EQ(run_kestrel("model --cfg models/yolov5n.yaml --nc 4 --save " + plain).code, 0);
  r = python(ref, "scripts/convert_to_ultralytics.py " + plain + " " + (dir / "plain.pt").string() + " --yolov5 " +
                      ref.dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(plain + " carries no model yaml: give --cfg"), std::string::npos) << r.out;
}
