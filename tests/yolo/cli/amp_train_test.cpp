// `kestrel train --amp` on the CPU: bf16-emulated trains (every convolution on bf16-rounded
// operands) and the run says how it computes; plain bf16 runs the same way where the CPU has bf16
// instructions and is refused, naming them, where it has not (forced with ONEDNN_MAX_CPU_ISA).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/bf16_operands.h"
#include "tests/dist/spawn.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using kestrel::testing::read_results_csv;
using kestrel::testing::run_command;
using kestrel::testing::run_kestrel;

namespace {

const std::string kTiny =
    "train --cfg models/yolov5n.yaml --data synthetic --device cpu --img-size 64 --batch-size 4"
    " --epochs 1 --workers 1 --max-batches 2 --noplots --project ";

TEST(AmpTrain, CpuBf16TrainsAndSaysSo) {
  const fs::path emulated = kestrel::testing::temp_dir("amp-bf16-emulated");
  const auto e = run_kestrel(kTiny + emulated.string() + " --amp bf16-emulated");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("float32 activations, bfloat16 convolutions (emulated in float32) compute on cpu"),
            std::string::npos) << e.out;
  const auto rows = read_results_csv(emulated / "exp/results.csv");
  ASSERT_EQ(rows.size(), 1u);
  for (int c = 1; c <= 3; ++c) EXPECT_TRUE(std::isfinite(rows[0][c]) && rows[0][c] > 0) << c;
  const fs::path native = kestrel::testing::temp_dir("amp-bf16");
  if (kestrel::kernels::cpu_bf16_support().native()) {
    const auto n = run_kestrel(kTiny + native.string() + " --amp bf16");
    EXPECT_EQ(n.code, 0) << n.out;
    EXPECT_NE(n.out.find("bfloat16 compute on cpu"), std::string::npos) << n.out;
    const auto native_rows = read_results_csv(native / "exp/results.csv");
    ASSERT_EQ(native_rows.size(), 1u);
    for (int c = 1; c <= 3; ++c) EXPECT_TRUE(std::isfinite(native_rows[0][c]) && native_rows[0][c] > 0) << c;
  }
  // Without the instructions, or with oneDNN held below them, plain bf16 is refused and says why.
  const auto refused = run_command("ONEDNN_MAX_CPU_ISA=AVX2 " + kestrel::testing::kestrel_binary().string() + " " +
                                   kTiny + native.string() + " --amp bf16");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.out.find("--amp bf16 on the CPU needs AVX-512 BF16 or AMX-BF16"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("--amp off"), std::string::npos) << refused.out;
  fs::remove_all(emulated);
  fs::remove_all(native);
}

}  // namespace
