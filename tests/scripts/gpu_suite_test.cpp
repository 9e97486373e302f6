// scripts/run-gpu-suite.sh on a machine without a GPU, from a bundle-shaped folder: every step
// that needs a GPU says it is skipped and why, a test binary's status and failing test names
// reach summary.txt, a short budget skips steps instead of overrunning, and what comes back is
// at most the device tool's 8 files (summary, results, one log archive).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_command;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_script(const fs::path& p, const std::string& body) {
  std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(p, fs::perms::owner_all);
}

// A folder shaped like an unpacked bundle, with fake test binaries instead of real ones.
struct FakeBundle {
  fs::path root, out;
  explicit FakeBundle(const std::string& name) {
    root = fs::temp_directory_path() / ("kestrel_gpu_suite_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "bin/tests");
    fs::create_directories(root / "models");
    fs::copy_file("scripts/run-gpu-suite.sh", root / "run-gpu-suite.sh");
    out = root / "out";
  }
  ~FakeBundle() { fs::remove_all(root); }
  CliResult run(const std::string& args) const {
    return run_command("OUT='" + out.string() + "' '" + (root / "run-gpu-suite.sh").string() + "' " + args);
  }
  std::string summary() const { return read_file(out / "summary.txt"); }
};

bool has_gpu() { return run_command("nvidia-smi -L").code == 0; }

}  // namespace

TEST(GpuSuite, WithoutAGpuEveryStepSaysItIsSkipped) {
  if (has_gpu()) GTEST_SKIP() << "this test checks the no-GPU path; nvidia-smi lists a GPU here";
  FakeBundle b("skips");
  write_script(b.root / "bin/tests/kernels_copy_cuda_test", "echo 'no CUDA device'; exit 77");
  const CliResult r = b.run("--budget 120");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string s = b.summary();
  EXPECT_NE(s.find("GPU: none"), std::string::npos) << s;
  EXPECT_NE(s.find("SKIP  kernels_copy_cuda_test"), std::string::npos) << s;
  EXPECT_NE(s.find("tests: 0 passed, 0 failed, 1 skipped"), std::string::npos) << s;
  EXPECT_NE(s.find("step, reference, e2e, profile: SKIPPED (no GPU"), std::string::npos) << s;
  EXPECT_NE(s.find("run-gpu-suite: done"), std::string::npos) << s;
  int files = 0;
  for (const auto& e : fs::directory_iterator(b.out)) {
    ++files;
    EXPECT_TRUE(e.is_regular_file()) << e.path();
  }
  EXPECT_LE(files, 8);
  ASSERT_TRUE(fs::exists(b.out / "logs.tar.xz")) << s;
  const CliResult listing = run_command("tar -tJf '" + (b.out / "logs.tar.xz").string() + "'");
  EXPECT_NE(listing.out.find("logs/kernels_copy_cuda_test.log"), std::string::npos) << listing.out;
  EXPECT_NE(listing.out.find("logs/facts.txt"), std::string::npos) << listing.out;
}

TEST(GpuSuite, FailingTestsAreNamedAndFailTheRun) {
  if (has_gpu()) GTEST_SKIP() << "this test checks the no-GPU path; nvidia-smi lists a GPU here";
  FakeBundle b("fails");
  write_script(b.root / "bin/tests/kernels_bad_cuda_test",
               "echo '[  FAILED  ] Conv2dCuda.MatchesCpu (3 ms)'; echo '[  FAILED  ] Conv2dCuda.MatchesCpu'; exit 1");
  write_script(b.root / "bin/tests/yolo_ok_cuda_test", "exit 0");
  const CliResult r = b.run("--budget 120 --steps tests");
  EXPECT_EQ(r.code, 1) << r.out;
  const std::string s = b.summary();
  EXPECT_NE(s.find("FAIL(exit_1)  kernels_bad_cuda_test"), std::string::npos) << s;
  EXPECT_NE(s.find("failed: Conv2dCuda.MatchesCpu\n"), std::string::npos) << s;
  EXPECT_NE(s.find("PASS  yolo_ok_cuda_test"), std::string::npos) << s;
  EXPECT_NE(s.find("tests: 1 passed, 1 failed, 0 skipped"), std::string::npos) << s;
  EXPECT_EQ(s.find("== facts"), std::string::npos) << "--steps tests ran another step:\n" << s;
}

// The bundle's combined binary (bin/tests/cuda_tests, every *_cuda_test.cpp in one): each of its
// suites runs as its own unit, with its own status, log and failing test names; --tests picks suites.
TEST(GpuSuite, TheCombinedBinaryRunsSuiteBySuite) {
  if (has_gpu()) GTEST_SKIP() << "this test checks the no-GPU path; nvidia-smi lists a GPU here";
  FakeBundle b("combined");
  write_script(b.root / "bin/tests/cuda_tests",
               "case \"$1\" in\n"
               "  --gtest_list_tests) printf 'CastCuda.\\n  Rounds\\nConv2dCuda.\\n  MatchesCpu\\n  Graphs\\n"
               "Typed/0.  # TypeParam = float\\n  Works\\nNmsCuda.\\n  Groups\\n' ;;\n"
               "  --gtest_filter=CastCuda.*) echo 'no CUDA device'; exit 77 ;;\n"
               "  --gtest_filter=NmsCuda.*) exit 0 ;;\n"
               "  --gtest_filter=Conv2dCuda.*) echo '[  FAILED  ] Conv2dCuda.Graphs (2 ms)'; exit 1 ;;\n"
               "  --gtest_filter=Typed/0.*) exit 0 ;;\n"
               "  *) echo \"unexpected $1\"; exit 3 ;;\n"
               "esac");
  const CliResult r = b.run("--budget 120 --steps tests");
  EXPECT_EQ(r.code, 1) << r.out;
  const std::string s = b.summary();
  EXPECT_NE(s.find("SKIP  CastCuda"), std::string::npos) << s;
  EXPECT_NE(s.find("FAIL(exit_1)  Conv2dCuda"), std::string::npos) << s;
  EXPECT_NE(s.find("failed: Conv2dCuda.Graphs"), std::string::npos) << s;
  EXPECT_NE(s.find("PASS  Typed_0"), std::string::npos) << s;
  EXPECT_NE(s.find("tests: 2 passed, 1 failed, 1 skipped"), std::string::npos) << s;
  // The newest fixes' suites (run-gpu-suite.sh's first_suites) run before the rest.
  ASSERT_NE(s.find("PASS  NmsCuda"), std::string::npos) << s;
  EXPECT_LT(s.find("PASS  NmsCuda"), s.find("SKIP  CastCuda")) << s;
  // One suite on request.
  const CliResult one = b.run("--budget 120 --steps tests --tests Typed_0");
  EXPECT_EQ(one.code, 0) << one.out;
  EXPECT_NE(b.summary().find("tests: 1 passed, 0 failed, 0 skipped"), std::string::npos) << b.summary();
}

TEST(GpuSuite, AShortBudgetSkipsStepsInsteadOfOverrunning) {
  if (has_gpu()) GTEST_SKIP() << "this test checks the no-GPU path; nvidia-smi lists a GPU here";
  FakeBundle b("budget");
  write_script(b.root / "bin/tests/kernels_slow_cuda_test", "sleep 30");
  // 15 s of the budget are kept for packing the logs, so 40 s leave 25: facts and tests start,
  // and the slow test is cut at what remains rather than at its own 90 s.
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = b.run("--budget 40 --steps facts,tests,sanitizer");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string s = b.summary();
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(s.find("TIMEOUT  kernels_slow_cuda_test"), std::string::npos) << s;
  EXPECT_NE(s.find("== sanitizer: SKIPPED ("), std::string::npos) << s;
  EXPECT_LT(secs, 40.0) << s;
}
