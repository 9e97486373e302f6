// What the kestrel binary links (its ELF DT_NEEDED entries, read with readelf): only libraries it
// uses, from a known list. cuBLAS in particular is not among them (issue 43: Kestrel calls no
// cuBLAS; `kestrel env` loads it only to say its version), so a machine without it runs kestrel.
// Skipped where binutils' readelf is missing. The OpenMP runtime and protobuf depend on the
// compiler: gcc builds link libgomp, the clang sanitizer builds (scripts/sanitize.sh) libomp. And
// no listed library is linked without being used (glibc's `ldd -u`, where it is present).
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "tests/support/cli.h"

TEST(LinkedLibraries, KestrelNeedsOnlyWhatItUses) {
  using kestrel::testing::run_command;
  if (run_command("command -v readelf").code != 0) GTEST_SKIP() << "no readelf (binutils)";
  const auto r = run_command("readelf -d " + kestrel::testing::kestrel_binary().string());
  ASSERT_EQ(r.code, 0) << r.out;
  // Library names without their version suffix.
  const std::set<std::string> allowed = {
      "libcudart", "libcudnn", "libnccl", "libopenblas", "libdnnl", "libgomp", "libomp", "libgloo", "libprotobuf-lite",
      "libyaml-cpp", "libopencv_core", "libopencv_imgproc", "libopencv_videoio", "libopencv_highgui", "libopencv_dnn",
      "libturbojpeg", "libpng16", "libz", "libonnx", "libonnx_proto", "libstdc++", "libm", "libgcc_s", "libc",
      "ld-linux-x86-64", "libcurl"};
  std::istringstream lines(r.out);
  int needed = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t open = line.find("(NEEDED)");
    if (open == std::string::npos) continue;
    const size_t a = line.find('[', open), b = line.find(']', open);
    ASSERT_NE(a, std::string::npos) << line;
    const std::string lib = line.substr(a + 1, b - a - 1);
    const std::string base = lib.substr(0, lib.find(".so"));
    EXPECT_TRUE(allowed.count(base)) << "kestrel links " << lib << ", which is not on the list of what it uses";
    EXPECT_EQ(base.find("libcublas"), std::string::npos) << lib;
    ++needed;
  }
  EXPECT_GT(needed, 5) << r.out;
}

TEST(LinkedLibraries, KestrelLinksNothingUnused) {
  using kestrel::testing::run_command;
  if (run_command("command -v ldd").code != 0) GTEST_SKIP() << "no ldd (glibc's)";
  const auto r = run_command("ldd -u -r " + kestrel::testing::kestrel_binary().string());
  // ldd -u exits 1 when it lists unused direct dependencies, 0 when there are none.
  EXPECT_EQ(r.out.find("Unused direct dependencies"), std::string::npos) << r.out;
}
