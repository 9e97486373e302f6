// `kestrel train`'s launcher side: usage errors found before any worker starts (exit 2, naming
// the numbers), and --sync-bn reaching the workers of a multi-process job.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"

namespace fs = std::filesystem;

namespace {

using kestrel::testing::kestrel_binary;

kestrel::testing::CliResult run(const std::string& args) { return kestrel::testing::run_kestrel(args); }

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_train_command_test_" + name);
  fs::remove_all(p);
  return p;
}

const std::string kTiny =
    "train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 1 --workers 1"
    " --max-batches 2 --noplots";

}  // namespace

TEST(TrainCommand, RefusesALaunchThatEveryWorkerWouldFail) {
  const fs::path project = scratch("usage");
  auto r = run(kTiny + " --batch-size 4 --nproc-per-node 3 --project " + project.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-size 4 must be a multiple of the world size 3"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(project)) << "a worker started";

  r = run(kTiny + " --batch-size 4 --nproc-per-node 2 --nnodes 2 --node-rank 0 --max-restarts 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-restarts works on a single node"), std::string::npos) << r.out;
  EXPECT_EQ(run(kTiny + " --max-restarts -1").code, 2);
  EXPECT_EQ(run(kTiny + " --nproc-per-node 2 --max-restarts x").code, 2);
}

TEST(TrainCommand, SyncBnReachesTheWorkers) {
  const fs::path project = scratch("syncbn");
  const auto r = run(kTiny + " --batch-size 4 --sync-bn --nproc-per-node 2 --max_restarts 0" +
                       " --master-port " + std::to_string(kestrel::testing::free_port()) +
                       " --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  EXPECT_FALSE(fs::exists(project / "exp2")) << r.out;
  fs::remove_all(project);
}

// The reference's spellings: a bare --cache means ram, and argparse abbreviations name their
// flag (--batch for --batch-size). Checked up to the launch check, which reads both.
TEST(TrainCommand, BareCacheAndAbbreviationsParseAsTheReference) {
  auto r = run("train --cache --batch 5 --nproc-per-node 2 --device cpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-size 5 must be a multiple of the world size 2"), std::string::npos) << r.out;
  r = run("train --cache disk --device cpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--cache supports ram"), std::string::npos) << r.out;
}

// --cuda-graph: a bad value is a usage error; "on" where graphs cannot run says why; "off" and
// "auto" train on the CPU (auto turns graphs off there).
TEST(TrainCommand, CudaGraphFlag) {
  auto r = run(kTiny + " --cuda-graph maybe");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--cuda-graph must be auto, on or off, got 'maybe'"), std::string::npos) << r.out;
  const fs::path project = scratch("cuda_graph");
  r = run(kTiny + " --cuda-graph on --project " + project.string());
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--cuda-graph on: it needs a CUDA device; use --cuda-graph off"), std::string::npos) << r.out;
  r = run(kTiny + " --cuda-graph off --project " + project.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("CUDA graphs:"), std::string::npos) << r.out;
  fs::remove_all(project);
}

// As the reference's Model(cfg or ckpt['model'].yaml): a YOLOv5 .pt without --cfg trains its own
// model, every tensor transferred (the anchors too, as the reference keeps them then); with --cfg
// the anchors stay the yaml's. Plain weights without --cfg are refused, naming the fix.
TEST(TrainCommand, PtWeightsBringTheirModel) {
  const fs::path project = scratch("pt_weights");
  const std::string common = "train --weights tests/data/yolov5n_synthetic.pt --data synthetic --epochs 1 "
                             "--img-size 64 --batch-size 4 --max-batches 1 --device cpu --workers 1 --noval "
                             "--noplots --no-tensorboard --noautoanchor --project " + project.string();
  auto r = run(common);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Transferred 349/349 items from tests/data/yolov5n_synthetic.pt"), std::string::npos) << r.out;
  r = run(common + " --cfg yolov5n.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Transferred 348/349 items"), std::string::npos) << r.out;
  const std::string plain = (project / "plain.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 4 --save " + plain).code, 0);
  r = run("train --weights " + plain + " --data synthetic --device cpu --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("carries no model yaml (plain weights): give the model with --cfg"), std::string::npos) << r.out;
  fs::remove_all(project);
}

// --resume continues a run the reference started (tests/data/tiny_train.pt: train.py's last.pt
// after epoch 1 of 3, batch 32): from epoch 2, in the checkpoint's own run directory, with its
// options; the finished run's results row is written and its last weights stripped.
TEST(TrainCommand, ResumesARunTheReferenceStarted) {
  const fs::path project = scratch("pt_resume");
  fs::create_directories(project / "exp/weights");
  const fs::path last = project / "exp/weights/last.pt";
  fs::copy_file("tests/data/tiny_train.pt", last);
  const auto r = run("train --resume " + last.string() + " --device cpu --workers 1 --no-tensorboard");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resuming training from " + last.string() + " from epoch 2 to 3 total epochs"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("tiny summary: 214 layers"), std::string::npos) << r.out;  // the checkpoint's model
  std::ifstream csv(project / "exp/results.csv");
  std::string header, row, extra;
  ASSERT_TRUE(std::getline(csv, header) && std::getline(csv, row));
  EXPECT_FALSE(std::getline(csv, extra)) << "one epoch resumed, one row";
  EXPECT_EQ(row.substr(0, row.find(',')).find_first_not_of(' '), row.substr(0, row.find(',')).find('2'));
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  fs::remove_all(project);
}
