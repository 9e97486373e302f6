// `kestrel segment train` end to end on the CPU, on a tiny polygon dataset the test writes: the
// run directory holds segment/train.py's results.csv (its KEYS at '%23s'), train_batch mosaics
// with masks and weights that `kestrel segment val` reads back; the flags are segment/train.py's
// (--mask-ratio, --no-overlap for the masks, no W&B flags, no --evolve), and a segmentation
// checkpoint is refused by `kestrel train --resume`; a 2-process Gloo run (the launcher starting
// `kestrel segment train` workers) completes with rank 0's results. Where ../shared/datasets/coco128-seg exists,
// a short smoke run on it.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"
#include "tests/yolo/train/seg_dataset.h"

namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_segment_train_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

const std::string kTiny =
    "segment train --cfg models/yolov5n-seg.yaml --device cpu --img-size 64 --batch-size 4 --workers 1";

}  // namespace

TEST(SegmentTrainCommand, TrainsAndItsWeightsValidate) {
  const fs::path root = scratch("e2e");
  const fs::path data = kestrel::testing::write_seg_dataset(root / "data");
  const auto r = kestrel::testing::run_kestrel(kTiny + " --epochs 2 --data " + data.string() + " --project " +
                                               (root / "runs").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path run = root / "runs/exp";
  // segment/train.py's console columns.
  EXPECT_NE(r.out.find("      Epoch    GPU_mem   box_loss   seg_loss   obj_loss   cls_loss  Instances       Size"),
            std::string::npos)
      << r.out;
  // GenericLogger's header: '%23s' names joined by commas, KEYS' order.
  std::string want;
  char cell[64];
  for (const char* k : {"epoch", "train/box_loss", "train/seg_loss", "train/obj_loss", "train/cls_loss",
                        "metrics/precision(B)", "metrics/recall(B)", "metrics/mAP_0.5(B)", "metrics/mAP_0.5:0.95(B)",
                        "metrics/precision(M)", "metrics/recall(M)", "metrics/mAP_0.5(M)", "metrics/mAP_0.5:0.95(M)",
                        "val/box_loss", "val/seg_loss", "val/obj_loss", "val/cls_loss", "x/lr0", "x/lr1", "x/lr2"}) {
    std::snprintf(cell, sizeof cell, "%s%23s", want.empty() ? "" : ",", k);
    want += cell;
  }
  EXPECT_EQ(first_line(run / "results.csv"), want);
  const auto rows = kestrel::testing::read_results_csv(run / "results.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 20u);
    EXPECT_GT(row[2], 0) << "train/seg_loss";
    EXPECT_GT(row[14], 0) << "val/seg_loss";
  }
  for (const char* f : {"weights/best.safetensors", "weights/last.safetensors", "opt.yaml", "hyp.yaml",
                        "train_batch0.jpg", "train_batch1.jpg", "results.png", "labels.jpg"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  std::ifstream opt(run / "opt.yaml");
  const std::string opt_text((std::istreambuf_iterator<char>(opt)), std::istreambuf_iterator<char>());
  EXPECT_NE(opt_text.find("mask_ratio: 4\n"), std::string::npos) << opt_text;
  EXPECT_NE(opt_text.find("no_overlap: false\n"), std::string::npos) << opt_text;

  const auto v = kestrel::testing::run_kestrel("segment val --weights " + (run / "weights/best.safetensors").string() +
                                               " --data " + data.string() + " --img 64 --device cpu --project " +
                                               (root / "val").string());
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_NE(v.out.find("Mask(P"), std::string::npos) << v.out;

  // A segmentation checkpoint resumes with its own command only.
  const auto d = kestrel::testing::run_kestrel("train --resume " + (run / "weights/last.safetensors").string());
  EXPECT_NE(d.code, 0);
  fs::remove_all(root);
}

// --no-overlap (one mask per instance) and --mask-ratio train; the masks' form and ratio reach
// opt.yaml. segment/train.py's flags only: no W&B flags (--evolve is tests/yolo/train/evolve_test's).
TEST(SegmentTrainCommand, FlagsAsSegmentTrainPy) {
  const fs::path root = scratch("flags");
  const fs::path data = kestrel::testing::write_seg_dataset(root / "data", 4);
  const auto r = kestrel::testing::run_kestrel(kTiny + " --epochs 1 --noplots --noval --no-overlap --mask-ratio 2 --data " +
                                               data.string() + " --project " + (root / "runs").string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream opt(root / "runs/exp/opt.yaml");
  const std::string opt_text((std::istreambuf_iterator<char>(opt)), std::istreambuf_iterator<char>());
  EXPECT_NE(opt_text.find("mask_ratio: 2\n"), std::string::npos) << opt_text;
  EXPECT_NE(opt_text.find("no_overlap: true\n"), std::string::npos) << opt_text;
  EXPECT_EQ(kestrel::testing::read_results_csv(root / "runs/exp/results.csv").size(), 1u);

  EXPECT_EQ(kestrel::testing::run_kestrel(kTiny + " --entity me").code, 2);
  EXPECT_EQ(kestrel::testing::run_kestrel(kTiny + " --mask-ratio 0").code, 2);
  const auto det = kestrel::testing::run_kestrel("segment train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 1 --data " +
                                                 data.string() + " --project " + (root / "runs").string());
  EXPECT_NE(det.code, 0);
  EXPECT_NE(det.out.find("needs a segmentation model"), std::string::npos) << det.out;
  fs::remove_all(root);
}

TEST(SegmentTrainCommand, TwoProcessGlooRun) {
  const fs::path root = scratch("ddp");
  const fs::path data = kestrel::testing::write_seg_dataset(root / "data", 4);
  const auto r = kestrel::testing::run_kestrel(kTiny + " --epochs 1 --noplots --nproc-per-node 2 --master-port " +
                                               std::to_string(kestrel::testing::free_port()) + " --data " + data.string() +
                                               " --project " + (root / "runs").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(kestrel::testing::read_results_csv(root / "runs/exp/results.csv").size(), 1u);
  EXPECT_TRUE(fs::exists(root / "runs/exp/weights/best.safetensors"));
  EXPECT_FALSE(fs::exists(root / "runs/exp2"));
  fs::remove_all(root);
}

TEST(SegmentTrainCommand, Coco128SegSmoke) {
  const fs::path coco = "/work/shared/datasets/coco128-seg";
  if (!fs::exists(coco / "images")) GTEST_SKIP() << "no coco128-seg at " << coco;
  const fs::path root = scratch("coco");
  fs::create_directories(root);
  // The shipped yaml, pointed at the shared copy.
  std::ifstream in("data/coco128-seg.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  yaml.replace(yaml.find("path: ../datasets/coco128-seg"), std::string("path: ../datasets/coco128-seg").size(),
               "path: " + coco.string());
  std::ofstream(root / "coco128-seg.yaml") << yaml;
  const auto r = kestrel::testing::run_kestrel(
      "segment train --cfg models/yolov5n-seg.yaml --device cpu --img-size 128 --batch-size 4 --workers 1"
      " --epochs 1 --noplots --max-batches 2 --data " + (root / "coco128-seg.yaml").string() + " --project " +
      (root / "runs").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(kestrel::testing::read_results_csv(root / "runs/exp/results.csv").size(), 1u);
  fs::remove_all(root);
}
