// `kestrel train`'s launcher side: usage errors found before any worker starts (exit 2, naming
// the numbers), --sync-bn reaching the workers of a multi-process job, and --resume with
// --evolve continuing an evolution.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

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

// As the reference, --resume with --evolve resumes no checkpoint: it continues the newest
// evolution's directory and its evolve.csv, with --cfg found by name as in any other run.
TEST(TrainCommand, ResumeWithEvolveContinuesTheLastEvolution) {
  const fs::path project = scratch("evolve_resume");
  fs::create_directories(project / "data/images");
  fs::create_directories(project / "data/labels");
  for (const char* name : {"a", "b", "c", "d"}) {  // four images: validation stays quick
    kestrel::yolo::data::write_jpeg((project / "data/images" / (std::string(name) + ".jpg")).string(),
                                    cv::Mat(64, 64, CV_8UC3, cv::Scalar(30, 90, 150)));
    std::ofstream(project / "data/labels" / (std::string(name) + ".txt")) << "0 0.5 0.5 0.4 0.4\n";
  }
  std::ofstream(project / "data/data.yaml") << "path: " << (project / "data").string()
                                            << "\ntrain: images\nval: images\nnames: [x]\n";
  const std::string evolve = "train --cfg yolov5n.yaml --data " + (project / "data/data.yaml").string() +
                             " --device cpu --img-size 64 --epochs 1 --workers 1 --max-batches 1 --noplots"
                             " --batch-size 4 --resume --evolve 1 --project " + (project / "runs").string();
  auto r = run(evolve);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run(evolve);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(project / "runs/exp2")) << r.out;
  std::ifstream csv(project / "runs/exp/evolve.csv");
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 3) << "a header and one row per generation";
  fs::remove_all(project);
}

// An image size no run could use is refused as a usage error naming the limit (it once failed
// inside OpenCV, asking for 2 TB).
TEST(TrainCommand, ImageSizesAboveTheLimitAreRefused) {
  const fs::path project = scratch("huge_img");
  const auto r = run("train --device cpu --img 1000000 --project " + project.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--img-size 1000000 is above the limit of 8192 pixels a side"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(project));
  EXPECT_EQ(run("train --device cpu --img-size 8193 --project " + project.string()).code, 2);
}
