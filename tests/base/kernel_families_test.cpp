// docs/architecture.md's kernel families, checked on the tree: every family (kernels/X.h with a
// CPU reference X_cpu.cpp or a CUDA version X.cu) has its CPU test, a CUDA parity test where it
// has a CUDA version, and a benchmark, or is named below with where that coverage lives instead,
// or as having none. A new family without them, or a listed exception that is no longer true,
// fails here. Runs from the source root (ctest's working directory).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

namespace fs = std::filesystem;

namespace {

// Families whose test of that kind lives elsewhere (through the op or module that runs them).
const std::map<std::string, std::string> kCpuTestElsewhere = {
    {"bf16_operands", "tests/kernels/conv2d_bf16_test.cpp"},
};
const std::map<std::string, std::string> kCudaTestElsewhere = {
    {"nms", "tests/yolo/eval/nms_cuda_test.cpp"},
    {"tta", "tests/yolo/eval/augmented_inference_cuda_test.cpp"},
    {"yolo_loss", "tests/yolo/train/loss_cuda_test.cpp"},
};
const std::map<std::string, std::string> kBenchmarkElsewhere = {
    {"concat", "bench/kernels/layers_bench.cpp"},    {"upsample", "bench/kernels/layers_bench.cpp"},
    {"maxpool", "bench/kernels/layers_bench.cpp"},   {"layout", "bench/kernels/layers_bench.cpp"},
    {"yolo_loss", "bench/kernels/loss_bench.cpp"},
};
// Families with no benchmark of their own: each is a small share of a step (a few launches over
// a parameter-sized or scalar buffer, or one pass over an activation), timed inside the whole step
// by build/train_step.
const std::set<std::string> kNoBenchmark = {"amp_scale", "bf16_operands", "cast", "detect", "fold_bn",
                                            "grad_compress", "random", "step_flags", "tta"};

std::set<std::string> families() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator("kernels")) {
    if (e.path().extension() != ".h") continue;
    const std::string f = e.path().stem().string();
    if (fs::exists("kernels/" + f + "_cpu.cpp") || fs::exists("kernels/" + f + ".cu")) out.insert(f);
  }
  return out;
}

}  // namespace

TEST(KernelFamilies, EachHasItsTestsAndBenchmarkOrSaysWhere) {
  const std::set<std::string> all = families();
  ASSERT_GT(all.size(), 15u) << "run from the source root";
  for (const std::string& f : all) {
    SCOPED_TRACE(f);
    const std::string cpu_test = "tests/kernels/" + f + "_test.cpp";
    EXPECT_TRUE(fs::exists(cpu_test) || (kCpuTestElsewhere.count(f) && fs::exists(kCpuTestElsewhere.at(f))))
        << "no " << cpu_test;
    if (fs::exists("kernels/" + f + ".cu")) {
      const std::string cuda_test = "tests/kernels/" + f + "_cuda_test.cpp";
      EXPECT_TRUE(fs::exists(cuda_test) || (kCudaTestElsewhere.count(f) && fs::exists(kCudaTestElsewhere.at(f))))
          << "no " << cuda_test;
    }
    const std::string bench = "bench/kernels/" + f + "_bench.cpp";
    EXPECT_TRUE(fs::exists(bench) || (kBenchmarkElsewhere.count(f) && fs::exists(kBenchmarkElsewhere.at(f))) ||
                kNoBenchmark.count(f))
        << "no " << bench;
    EXPECT_FALSE(fs::exists(bench) && kNoBenchmark.count(f)) << "has a benchmark now: drop it from kNoBenchmark";
  }
  // Every exception names a family that exists.
  for (const auto* list : {&kCpuTestElsewhere, &kCudaTestElsewhere, &kBenchmarkElsewhere})
    for (const auto& [f, where] : *list) EXPECT_TRUE(all.count(f)) << f << " (" << where << ") is no family";
  for (const std::string& f : kNoBenchmark) EXPECT_TRUE(all.count(f)) << f << " is no family";
}
