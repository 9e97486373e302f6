#include "dist/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "dist/env.h"
#include "dist/restart_policy.h"
#include "tests/dist/spawn.h"
#include "tests/support/sanitizers.h"
#include "tests/support/testing.h"

namespace kestrel::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The workers find their output directory here (the launcher passes its environment on).
fs::path out_dir() { return env_or_empty("KESTREL_TEST_OUT"); }

LaunchOptions options_for(const std::string& worker_test, int nproc, const fs::path& dir) {
  LaunchOptions o;
  o.nproc_per_node = nproc;
  o.master_port = testing::free_port();
  o.log_dir = dir / "logs";
  o.command = {current_executable().string(), "--gtest_filter=LauncherWorker." + worker_test,
               "--gtest_also_run_disabled_tests"};
  o.grace = 5s;
  ::setenv("KESTREL_TEST_OUT", dir.c_str(), 1);
  return o;
}

// --- worker bodies ---------------------------------------------------------------------------

TEST(LauncherWorker, DISABLED_ReportEnv) {
  std::ofstream(out_dir() / ("env" + env_or_empty("RANK")))
      << env_or_empty("RANK") << " " << env_or_empty("WORLD_SIZE") << " "
      << env_or_empty("LOCAL_RANK") << " " << env_or_empty("LOCAL_WORLD_SIZE") << " "
      << env_or_empty("MASTER_ADDR") << " " << env_or_empty("MASTER_PORT") << " "
      << env_or_empty("OMP_NUM_THREADS");
  std::cout << "hello from rank " << env_or_empty("RANK") << std::endl;
}

// Rank 1 fails quickly; the others would run for a long time unless stopped.
TEST(LauncherWorker, DISABLED_OneFails) {
  std::ofstream(out_dir() / ("pid" + env_or_empty("RANK"))) << ::getpid();
  if (env_or_empty("RANK") == "1") {
    // Fail once every other rank has written its pid (under a sanitizer they start slowly), so
    // that the launcher has live workers to stop and the test their pids to check.
    const int world = std::stoi(env_or_empty("WORLD_SIZE"));
    const auto deadline = Clock::now() + 10s * testing::kSanitizerSlowdown;
    for (int rank = 0; rank < world; ++rank) {
      const fs::path pid = out_dir() / ("pid" + std::to_string(rank));
      while ((!fs::exists(pid) || fs::file_size(pid) == 0) && Clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    }
    std::this_thread::sleep_for(300ms);
    std::cerr << "rank 1 gives up: simulated failure" << std::endl;
    std::_Exit(3);
  }
  std::this_thread::sleep_for(30s);
}

TEST(LauncherWorker, DISABLED_Sleep) {
  std::ofstream(out_dir() / ("pid" + env_or_empty("RANK"))) << ::getpid();
  std::ofstream(out_dir() / ("starts" + env_or_empty("RANK")), std::ios::app) << ::getpid() << "\n";
  std::this_thread::sleep_for(30s);
}

// This process's argv, as the launcher gave it.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline");
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  return args;
}

// Both attempts rendezvous on the same port. In the first, rank 0 writes a (fake) checkpoint and
// rank 1 then dies; the second gets `--resume <that checkpoint>` and succeeds.
TEST(LauncherWorker, DISABLED_GlooJobFailingOnce) {
  DistFlags flags;
  flags.timeout = 10s;
  const DistOptions o = resolve_dist_options(flags, process_environment());
  auto group = init_process_group("gloo", o, Device::cpu());
  const std::vector<std::string> args = own_arguments();
  const auto resume = std::find(args.begin(), args.end(), "--resume");
  if (resume != args.end()) {
    ASSERT_NE(resume + 1, args.end());
    ASSERT_EQ(o.restart_count, 1);  // from KESTREL_RESTART_COUNT
    std::ofstream(out_dir() / ("resumed" + std::to_string(o.rank))) << *(resume + 1);
    group->barrier()->wait();
    return;
  }
  ASSERT_EQ(o.restart_count, 0);
  if (o.rank == 0) {
    const fs::path checkpoint = out_dir() / "project/exp/weights/last.safetensors";
    fs::create_directories(checkpoint.parent_path());
    std::ofstream(checkpoint) << "epoch 0";
  }
  group->barrier()->wait();  // the checkpoint exists before rank 1 dies
  if (o.rank == 1) {
    std::cerr << "rank 1 dies on the first attempt" << std::endl;
    std::_Exit(5);
  }
  std::this_thread::sleep_for(30s);
}

// A real job: the ranks find each other from the launcher's variables alone.
TEST(LauncherWorker, DISABLED_GlooJob) {
  DistFlags flags;
  flags.timeout = 10s;
  const DistOptions o = resolve_dist_options(flags, process_environment());
  auto group = init_process_group("gloo", o, Device::cpu());
  Tensor x = Tensor::full({5}, o.rank + 1.0, DType::F32);
  group->all_reduce(x)->wait();
  const double expected = o.world_size * (o.world_size + 1) / 2.0;
  ASSERT_TRUE(testing::all_close(x, Tensor::full({5}, expected, DType::F64), 0.0, 0.0));
}

// Waits (up to 10 s) until each of `ranks` DISABLED_Sleep workers has written both its files: pid
// first, then starts. A file can exist before its contents are written (an ofstream creates it,
// and writes when it closes), so a signal sent once the files merely exist could stop a worker
// between the two, or leave a pid file empty to read.
bool sleep_workers_started(const fs::path& dir, int ranks) {
  const auto deadline = Clock::now() + 10s * testing::kSanitizerSlowdown;
  for (int rank = 0; rank < ranks; ++rank) {
    const fs::path starts = dir / ("starts" + std::to_string(rank));
    while (!(fs::exists(starts) && fs::file_size(starts) > 0)) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
  }
  return true;
}

bool process_gone(const fs::path& pid_file) {
  const pid_t pid = std::stoi(read_file(pid_file));
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// --- tests -------------------------------------------------------------------------------------

TEST(Launcher, StripsLauncherFlags) {
  const std::vector<std::string> args = {
      "kestrel", "train",           "--nproc-per-node", "4", "--epochs",
      "3",       "--nnodes=2",      "--node-rank",      "1", "--master-addr",
      "h",       "--master-port=5", "--batch-size",     "64"};
  EXPECT_EQ(strip_launcher_flags(args),
            (std::vector<std::string>{"kestrel", "train", "--epochs", "3", "--batch-size", "64"}));
  // `kestrel train` takes underscores for dashes: a worker left with --nproc_per_node would
  // launch workers of its own.
  EXPECT_EQ(strip_launcher_flags({"train", "--nproc_per_node", "2", "--max-restarts", "3",
                                  "--max_restarts=1", "--master_port", "5", "--noval"}),
            (std::vector<std::string>{"train", "--noval"}));
}

TEST(Launcher, WorkersSeeTheirRanksAndOnlyRankZeroPrints) {
  const fs::path dir = testing::temp_dir("launch");
  LaunchOptions o = options_for("DISABLED_ReportEnv", 3, dir);
  // Each worker's share of the cores, unless the environment already sizes OpenMP.
  const char* set = std::getenv("OMP_NUM_THREADS");
  const std::string omp_threads = set ? set : std::to_string(dist::omp_threads_per_worker(3));
  o.nnodes = 2;
  o.node_rank = 1;  // ranks 3, 4, 5 of 6
  const LaunchResult r = launch_workers(o);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.failed_rank, -1);
  for (int local = 0; local < 3; ++local) {
    const int rank = 3 + local;
    EXPECT_EQ(read_file(dir / ("env" + std::to_string(rank))),
              std::to_string(rank) + " 6 " + std::to_string(local) + " 3 127.0.0.1 " +
                  std::to_string(o.master_port) + " " + omp_threads);
    EXPECT_NE(read_file(o.log_dir / ("rank" + std::to_string(rank) + ".log"))
                  .find("hello from rank " + std::to_string(rank)),
              std::string::npos);
  }
  fs::remove_all(dir);
}

// Two launches into one log directory (two runs given one project): the second finds rank1.log
// held by the first's live worker, leaves it whole and writes rank1.<its pid>.log. Here the test
// holds the first launch's log open and locked, as that worker would.
TEST(Launcher, ALogHeldByAnotherLaunchIsLeftAlone) {
  const fs::path dir = testing::temp_dir("launch");
  LaunchOptions o = options_for("DISABLED_ReportEnv", 2, dir);
  fs::create_directories(o.log_dir);
  const fs::path held = o.log_dir / "rank1.log";
  std::ofstream(held) << "the other launch's rank 1\n";
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const LaunchResult r = launch_workers(o);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(read_file(held), "the other launch's rank 1\n");
  const fs::path own = o.log_dir / ("rank1." + std::to_string(::getpid()) + ".log");
  EXPECT_NE(read_file(own).find("hello from rank 1"), std::string::npos) << own;
  ::close(fd);

  // Released, the name is free again and this launch's log replaces the old one.
  EXPECT_EQ(launch_workers(options_for("DISABLED_ReportEnv", 2, dir)).exit_code, 0);
  EXPECT_NE(read_file(held).find("hello from rank 1"), std::string::npos);
  EXPECT_EQ(read_file(held).find("the other launch"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Launcher, RunsAGlooJob) {
  const fs::path dir = testing::temp_dir("launch");
  const LaunchResult r = launch_workers(options_for("DISABLED_GlooJob", 3, dir));
  EXPECT_EQ(r.exit_code, 0) << r.message;
  fs::remove_all(dir);
}

TEST(Launcher, AFailingWorkerStopsTheOthers) {
  const fs::path dir = testing::temp_dir("launch");
  const auto start = Clock::now();
  const LaunchResult r = launch_workers(options_for("DISABLED_OneFails", 3, dir));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(r.message.find("rank 1 (local rank 1, pid"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("exited with code 3"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("rank 1 gives up"), std::string::npos) << r.message;  // its log tail
  for (int rank : {0, 2}) EXPECT_TRUE(process_gone(dir / ("pid" + std::to_string(rank))));
  fs::remove_all(dir);
}

TEST(Launcher, ForwardsSigtermAndExitsWithItsCode) {
  const fs::path dir = testing::temp_dir("launch");
  const LaunchOptions o = options_for("DISABLED_Sleep", 2, dir);
  // The launcher runs in a child process so that the signal goes to it alone.
  const pid_t launcher = ::fork();
  if (launcher == 0) std::_Exit(launch_workers(o).exit_code);
  ASSERT_TRUE(sleep_workers_started(dir, 2)) << "workers did not start";
  const auto start = Clock::now();
  ::kill(launcher, SIGTERM);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  for (int rank : {0, 1}) EXPECT_TRUE(process_gone(dir / ("pid" + std::to_string(rank))));
  fs::remove_all(dir);
}

TEST(Launcher, RestartsAfterAFailureResumingOnTheSamePort) {
  const fs::path dir = testing::temp_dir("launch");
  const LaunchOptions o = options_for("DISABLED_GlooJobFailingOnce", 3, dir);
  RestartPolicy policy({o.command, dir / "project", "exp", 2});
  const LaunchResult r = launch_workers(o, &policy);
  ASSERT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.restarts, 1);
  EXPECT_EQ(policy.restarts_used(), 1);
  for (int rank : {0, 1, 2})
    EXPECT_EQ(read_file(dir / ("resumed" + std::to_string(rank))),
              (dir / "project/exp/weights/last.safetensors").string());
  // The dead rank's first log is kept; the second attempt wrote a fresh rank1.log.
  EXPECT_NE(read_file(o.log_dir / "rank1.attempt1.log").find("rank 1 dies on the first attempt"),
            std::string::npos);
  EXPECT_EQ(read_file(o.log_dir / "rank1.log").find("dies"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.log_dir / "rank2.attempt1.log"));
  fs::remove_all(dir);
}

TEST(Launcher, FailsAsBeforeOnceTheRestartsAreUsed) {
  const fs::path dir = testing::temp_dir("launch");
  const LaunchOptions o = options_for("DISABLED_OneFails", 2, dir);
  RestartPolicy policy({o.command, dir / "project", "exp", 2});
  const LaunchResult r = launch_workers(o, &policy);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.restarts, 2);
  EXPECT_NE(r.message.find("all 2 restart(s) used"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("rank 1 gives up"), std::string::npos) << r.message;
  for (const char* log : {"rank1.attempt1.log", "rank1.attempt2.log", "rank1.log"})
    EXPECT_NE(read_file(o.log_dir / log).find("rank 1 gives up"), std::string::npos) << log;
  fs::remove_all(dir);
}

TEST(Launcher, AnInterruptedLauncherDoesNotRestart) {
  const fs::path dir = testing::temp_dir("launch");
  const LaunchOptions o = options_for("DISABLED_Sleep", 2, dir);
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    RestartPolicy policy({o.command, dir / "project", "exp", 3});
    std::_Exit(launch_workers(o, &policy).exit_code);
  }
  ASSERT_TRUE(sleep_workers_started(dir, 2)) << "workers did not start";
  ::kill(launcher, SIGINT);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  for (int rank : {0, 1})
    EXPECT_EQ(read_file(dir / ("starts" + std::to_string(rank))),
              read_file(dir / ("pid" + std::to_string(rank))) + "\n")
        << "rank " << rank << " was started again";
  fs::remove_all(dir);
}

TEST(Launcher, AProgramThatCannotStartIsReported) {
  const fs::path dir = testing::temp_dir("launch");
  LaunchOptions o = options_for("unused", 2, dir);
  o.command = {"/nonexistent/kestrel"};
  const LaunchResult r = launch_workers(o);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_GE(r.failed_rank, 0);
  fs::remove_all(dir);
}

TEST(Launcher, RefusesBadOptions) {
  LaunchOptions o;
  o.command = {"/bin/true"};
  o.nproc_per_node = 0;
  EXPECT_THROW(launch_workers(o), Error);
  o.nproc_per_node = 1;
  o.node_rank = 1;  // only node 0 exists
  EXPECT_THROW(launch_workers(o), Error);
  o.node_rank = 0;
  o.command.clear();
  EXPECT_THROW(launch_workers(o), Error);
}

}  // namespace
}  // namespace kestrel::dist
