// `kestrel model` for every kind of model the reference builds: a -seg yaml prints its table and
// summary line (Segment last), a detection yaml cut with --cutoff prints the classifier the
// reference's -cls models are (Classify in place of layer 9), and their weights save and load back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using kestrel::testing::run_kestrel;

TEST(ModelCommand, SegmentationAndClassifierModels) {
  auto r = run_kestrel("model --cfg yolov5n-seg.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("models.yolo.Segment"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("YOLOv5n-seg summary: 225 layers, 1991549 parameters, 1991549 gradients, 7.2 GFLOPs"),
            std::string::npos) << r.out;
  r = run_kestrel("model --cfg yolov5n.yaml --cutoff 10 --img-size 224");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("  9                -1  1   1611240  models.common.Classify                  [256, 1000]"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Model summary: 118 layers, 2493000 parameters, 2493000 gradients, 0.5 GFLOPs"),
            std::string::npos) << r.out;
  const fs::path w = fs::temp_directory_path() / ("kestrel_model_cls_" + std::to_string(::getpid()) + ".safetensors");
  r = run_kestrel("model --cfg yolov5n.yaml --cutoff 10 --nc 7 --save " + w.string());
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kestrel("model --cfg yolov5n.yaml --cutoff 10 --nc 7 --weights " + w.string());
  EXPECT_EQ(r.code, 0) << r.out;
  r = run_kestrel("model --cfg yolov5n.yaml --cutoff 12 --nc 7");  // Classify replaces layer 11, reading layer 10
  EXPECT_EQ(r.code, 0) << r.out;
  r = run_kestrel("model --cfg yolov5n.yaml --cutoff 13");  // the head would replace a Concat
  EXPECT_EQ(r.code, 1) << r.out;
  fs::remove(w);
}
