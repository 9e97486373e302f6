// End to end: `kestrel train --nproc-per-node 2 --max-restarts 1` on the CPU loses rank 1 to
// SIGKILL after the first epoch's checkpoint, restarts both workers from that checkpoint on the
// same port, and ends with the results of an uninterrupted run; killed before any checkpoint, the
// job starts over in its own run directory. Runs the `kestrel` binary built next to this test.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"

namespace {

namespace fs = std::filesystem;
using kestrel::testing::read_results_csv;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `kestrel train` with the tiny CPU job's flags, writing under `project`; stdout and stderr go to
// project/launcher.log. Returns the launcher's pid.
pid_t start_job(const fs::path& project, int port, int epochs = 3) {
  const std::string exe = (kestrel::dist::current_executable().parent_path() / "kestrel").string();
  std::vector<std::string> args = {
      exe, "train", "--cfg", "models/yolov5n.yaml", "--device", "cpu", "--img-size", "64",
      "--batch-size", "4", "--epochs", std::to_string(epochs), "--workers", "1", "--max-batches", "3", "--noplots",
      "--nproc-per-node", "2", "--max-restarts", "1", "--project", project.string(),
      "--master-port", std::to_string(port)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  fs::create_directories(project);
  const std::string log = (project / "launcher.log").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The launcher's exit code, or nullopt when it had to be killed at the deadline.
std::optional<int> wait_job(pid_t pid, std::chrono::seconds deadline) {
  const auto stop = Clock::now() + deadline;
  int status = 0;
  for (pid_t done; (done = ::waitpid(pid, &status, WNOHANG)) != pid;) {
    if (done < 0) return std::nullopt;  // not our child (any more)
    if (Clock::now() > stop) {
      ::kill(pid, SIGKILL);  // its workers get SIGTERM (PR_SET_PDEATHSIG)
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(50ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The launcher's child whose environment says RANK=<rank>, or -1.
pid_t find_worker(pid_t launcher, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::stringstream stat(read_file(entry.path() / "stat"));
    std::string pid, comm, state;
    pid_t parent = 0;
    stat >> pid >> comm >> state >> parent;  // the test's processes have no spaces in comm
    if (parent != launcher) continue;
    std::stringstream environ_text(read_file(entry.path() / "environ"));
    for (std::string var; std::getline(environ_text, var, '\0');)
      if (var == "RANK=" + std::to_string(rank)) return std::stoi(name);
  }
  return -1;
}

// Kills a launcher still running when a test ends early (its workers follow it).
struct JobGuard {
  pid_t pid;
  ~JobGuard() {
    if (::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

TEST(ElasticRestart, AKilledWorkerIsRestartedFromTheLastCheckpoint) {
  const fs::path binary = kestrel::dist::current_executable().parent_path() / "kestrel";
  ASSERT_TRUE(fs::exists(binary)) << binary << " is missing: build the `kestrel` target too";
  const fs::path dir = kestrel::testing::temp_dir("elastic");
  const fs::path whole = dir / "whole", killed = dir / "killed";

  auto t0 = Clock::now();
  const std::optional<int> whole_rc = wait_job(start_job(whole, kestrel::testing::free_port()), 300s);
  ASSERT_EQ(whole_rc, 0) << read_file(whole / "launcher.log");
  std::cout << "uninterrupted run: " << std::chrono::duration<double>(Clock::now() - t0).count()
            << " s" << std::endl;

  t0 = Clock::now();
  const pid_t launcher = start_job(killed, kestrel::testing::free_port());
  const JobGuard guard{launcher};
  const fs::path run = killed / "exp";
  pid_t victim = -1;
  while (Clock::now() - t0 < 240s) {
    if (fs::exists(run / "weights/last.safetensors") && read_results_csv(run / "results.csv").size() == 1)
      victim = find_worker(launcher, 1);
    if (victim > 0 || ::waitpid(launcher, nullptr, WNOHANG) == launcher) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(victim, 0) << "no first-epoch checkpoint with rank 1 running\n" << read_file(killed / "launcher.log");
  const std::string first_checkpoint = read_file(run / "weights/last.safetensors");  // (the last one is stripped)
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const std::optional<int> killed_rc = wait_job(launcher, 300s);
  const std::string log = read_file(killed / "launcher.log");
  std::cout << "run with rank 1 killed after epoch 0: "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s" << std::endl;
  ASSERT_EQ(killed_rc, 0) << log;

  EXPECT_NE(log.find("rank 1 (local rank 1, pid " + std::to_string(victim) + ") was killed by signal 9"),
            std::string::npos) << log;
  EXPECT_NE(log.find("restart 1/1: resuming from " + (run / "weights/last.safetensors").string()),
            std::string::npos) << log;
  EXPECT_TRUE(fs::exists(killed / "rank1.attempt1.log"));
  EXPECT_TRUE(fs::exists(killed / "rank1.log"));
  EXPECT_FALSE(fs::exists(killed / "exp2")) << "the restart made a run directory of its own";
  // The checkpoint carried the settled gradient bucket layout, and the restart adopted it.
  EXPECT_NE(first_checkpoint.find("bucket_layout"), std::string::npos);
  for (const char* rank_log : {"rank0.log", "rank1.log"})
    EXPECT_EQ(read_file(killed / rank_log).find("laying them out anew"), std::string::npos) << rank_log;

  // The resumed run ends where the uninterrupted one does: the same rows, number for number (the
  // trainer resumes bitwise on the CPU, so even the '%20.5g' roundings agree).
  const auto expected = read_results_csv(whole / "exp/results.csv");
  const auto got = read_results_csv(run / "results.csv");
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_EQ(got.size(), 3u) << read_file(run / "results.csv");
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), expected[r].size());
    for (size_t c = 0; c < got[r].size(); ++c)
      EXPECT_EQ(got[r][c], expected[r][c]) << "results.csv row " << r << " column " << c;
  }
  fs::remove_all(dir);
}

// Killed before the first checkpoint: the job starts over, in the run directory it had made
// (`--name exp --exist-ok`), not in exp2.
TEST(ElasticRestart, AWorkerKilledBeforeAnyCheckpointStartsOverInTheSameRunDirectory) {
  const fs::path project = kestrel::testing::temp_dir("elastic");
  const auto t0 = Clock::now();
  const pid_t launcher = start_job(project, kestrel::testing::free_port(), 1);
  const JobGuard guard{launcher};
  pid_t victim = -1;
  while (victim < 0 && Clock::now() - t0 < 240s && ::waitpid(launcher, nullptr, WNOHANG) == 0) {
    if (fs::exists(project / "exp/opt.yaml")) victim = find_worker(launcher, 1);
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(victim, 0) << "rank 1 not found\n" << read_file(project / "launcher.log");
  ASSERT_FALSE(fs::exists(project / "exp/weights/last.safetensors")) << "killed too late";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const std::optional<int> rc = wait_job(launcher, 300s);
  const std::string log = read_file(project / "launcher.log");
  std::cout << "run with rank 1 killed in epoch 0: "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s" << std::endl;
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("restart 1/1: no checkpoint of this run yet, starting over"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(project / "exp2")) << log;
  EXPECT_EQ(read_results_csv(project / "exp/results.csv").size(), 1u);
  fs::remove_all(project);
}

}  // namespace
