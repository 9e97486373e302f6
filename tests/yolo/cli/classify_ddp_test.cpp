// `kestrel classify train --nproc-per-node 2`: the launcher starts two Gloo ranks on the CPU, each
// trains on its DistributedSampler half (batch / world images a step) with gradients averaged by
// the Reducer and rank 0's buffers broadcast, and rank 0 alone validates, prints and writes the
// run (rank 1's output goes to rank1.log); the weights it writes validate. A batch that does not
// divide among the ranks is refused before any worker starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/cli.h"
#include "tests/yolo/cli/classify_folder.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

TEST(ClassifyDdp, TwoGlooRanksTrainAndRankZeroWritesTheRun) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_classify_ddp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  kestrel::testing::make_classify_folder(dir / "data", {"a", "b", "c"}, 8, 2);
  const std::string common = " --data " + (dir / "data").string() + " --img 32 --epochs 2 --device cpu --workers 1"
                             " --noplots --project " + (dir / "runs").string();
  CliResult r = run_kestrel("classify train --model yolov5n.yaml --batch 8 --nproc-per-node 2 --master-port " +
                            std::to_string(29800 + ::getpid() % 100) + common);
  ASSERT_EQ(r.code, 0) << r.out;
  // 24 images, 12 a rank, 4 a step: 3 batches an epoch on each rank.
  EXPECT_NE(r.out.find("3/3"), std::string::npos) << r.out;
  EXPECT_EQ(kestrel::testing::read_results_csv(dir / "runs" / "exp" / "results.csv").size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "runs" / "rank1.log"));
  EXPECT_TRUE(fs::exists(dir / "runs" / "exp" / "weights" / "best.safetensors"));
  r = run_kestrel("classify val --weights " + (dir / "runs" / "exp" / "weights" / "best.safetensors").string() +
                  " --data " + (dir / "data").string() + " --img 32 --device cpu --project " + (dir / "runs").string());
  EXPECT_EQ(r.code, 0) << r.out;

  r = run_kestrel("classify train --model yolov5n.yaml --batch 7 --nproc-per-node 2" + common);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("multiple of the world size 2"), std::string::npos) << r.out;
  fs::remove_all(dir);
}
