// Paths and devices as the reference user gives them, through the kestrel binary: --cfg by the
// shipped model's name and the default cfg from another working directory, and a --device list
// naming GPUs this machine lacks refused before any worker starts.
#include <unistd.h>

#include <filesystem>

#include "tests/support/cli.h"
#include "tests/support/testing.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;
using kestrel::testing::run_kestrel_in;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_reference_paths_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(ReferencePaths, CfgByNameFromAnotherDirectory) {
  const fs::path dir = scratch("cfg");
  CliResult r = run_kestrel_in(dir, "model --cfg yolov5n.yaml --img-size 64");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "Detect")) << r.out;
  // The default model (models/yolov5s.yaml) resolves too: train gets as far as its launch check.
  r = run_kestrel_in(dir, "train --device cpu --batch-size 3 --nproc-per-node 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(mentions(r.out, "--batch-size 3 must be a multiple of the world size 2")) << r.out;
  r = run_kestrel_in(dir, "model --cfg yolov5q.yaml");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "--cfg 'yolov5q.yaml': no such file")) << r.out;
  EXPECT_TRUE(mentions(r.out, "yolov5n.yaml, yolov5n6.yaml")) << r.out;
  fs::remove_all(dir);
}

TEST(ReferencePaths, DeviceListNamingMissingGpusIsRefused) {
  const fs::path dir = scratch("device");
  const CliResult r = run_kestrel("train --device 0,63 --batch-size 4 --epochs 1 --project " +
                                  (dir / "runs").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "--device 0,63: GPU ") && mentions(r.out, " does not exist (this machine has ")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "runs")) << "a run started";
  fs::remove_all(dir);
}
