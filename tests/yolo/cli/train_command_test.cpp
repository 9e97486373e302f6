// `kestrel train`'s launcher side: usage errors found before any worker starts (exit 2, naming
// the numbers), and --sync-bn reaching the workers of a multi-process job.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "tests/dist/spawn.h"
#include "tests/support/testing.h"

namespace fs = std::filesystem;

namespace {

fs::path kestrel_binary() { return fs::read_symlink("/proc/self/exe").parent_path() / "kestrel"; }

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = kestrel_binary().string() + " " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

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
  Result r = run(kTiny + " --batch-size 4 --nproc-per-node 3 --project " + project.string());
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
  const Result r = run(kTiny + " --batch-size 4 --sync-bn --nproc-per-node 2 --max_restarts 0" +
                       " --master-port " + std::to_string(kestrel::testing::free_port()) +
                       " --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  EXPECT_FALSE(fs::exists(project / "exp2")) << r.out;
  fs::remove_all(project);
}
