// `kestrel env`: one line per CUDA library with the version found at run time and the one built
// against, and the GPU count (none here, with CUDA's reason, and still exit 0).
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/cli.h"

using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

TEST(EnvCommand, PrintsEveryLibraryAndTheGpus) {
  const CliResult r = run_kestrel("env");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* line : {"CUDA runtime", "CUDA driver", "cuBLAS", "cuDNN", "NCCL", "GPUs"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing:\n" << r.out;
  // Versions are numbers, never the raw codes (cuDNN 9.x, not 91002).
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(cuDNN\s+9\.\d+\.\d+\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(NCCL\s+2\.\d+\.\d+\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(built with\s+13\.\d+\n)"))) << r.out;
}

TEST(EnvCommand, RefusesArguments) {
  const CliResult r = run_kestrel("env --bogus");
  EXPECT_EQ(r.code, 2) << r.out;
}
