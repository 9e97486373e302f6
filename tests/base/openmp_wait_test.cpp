// settle_openmp_wait: a shorter OpenMP spin unless the user chose one, set by running the program
// again so that libgomp reads it when it loads.
#include "base/openmp_wait.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

using namespace kestrel;

TEST(OpenmpWait, SetsTheSpinOnlyWhenTheUserChoseNothing) {
  EXPECT_EQ(openmp_spin_to_set(nullptr, nullptr), std::string(kSpinCount));
  EXPECT_EQ(openmp_spin_to_set("active", nullptr), std::nullopt);
  EXPECT_EQ(openmp_spin_to_set("PASSIVE", nullptr), std::nullopt);
  EXPECT_EQ(openmp_spin_to_set(nullptr, "infinite"), std::nullopt);
  EXPECT_EQ(openmp_spin_to_set("", nullptr), std::nullopt) << "a set but empty policy is the user's";
}

// Run as a child by the next test (KESTREL_OPENMP_PROBE set): counts its starts in the
// environment, settles, and prints what it runs with.
TEST(OpenmpWait, Probe) {
  const char* probe = std::getenv("KESTREL_OPENMP_PROBE");
  if (!probe) GTEST_SKIP() << "runs only as the child of ReExecutesOnceWithTheSpinSet";
  const char* starts = std::getenv("KESTREL_OPENMP_PROBE_STARTS");
  setenv("KESTREL_OPENMP_PROBE_STARTS", std::to_string(starts ? std::atoi(starts) + 1 : 1).c_str(), 1);
  char name[] = "openmp_wait_test", filter[] = "--gtest_filter=OpenmpWait.Probe";
  char* argv[] = {name, filter, nullptr};  // as the parent started it
  settle_openmp_wait(argv);
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  std::printf("probe: starts=%s spin=%s\n", std::getenv("KESTREL_OPENMP_PROBE_STARTS"),
              spin ? spin : "unset");
}

namespace {
// Runs this binary's Probe case with a clean OpenMP environment plus `extra`; its output line.
std::string run_probe(const char* extra_name, const char* extra_value) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("KESTREL_OPENMP_PROBE_STARTS");
    unsetenv("GTEST_TOTAL_SHARDS");
    unsetenv("GTEST_SHARD_INDEX");
    setenv("KESTREL_OPENMP_PROBE", "1", 1);
    if (extra_name) setenv(extra_name, extra_value, 1);
    execl("/proc/self/exe", "openmp_wait_test", "--gtest_filter=OpenmpWait.Probe", nullptr);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const size_t at = out.find("probe: ");
  return at == std::string::npos ? out : out.substr(at, out.find('\n', at) - at);
}
}  // namespace

TEST(OpenmpWait, ReExecutesOnceWithTheSpinSet) {
  EXPECT_EQ(run_probe(nullptr, nullptr), std::string("probe: starts=2 spin=") + kSpinCount);
  EXPECT_EQ(run_probe("OMP_WAIT_POLICY", "active"), "probe: starts=1 spin=unset");
  EXPECT_EQ(run_probe("GOMP_SPINCOUNT", "1000"), "probe: starts=1 spin=1000");
}
