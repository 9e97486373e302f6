// Multi-process tests: the test binary runs copies of itself as the ranks of a job. Each copy runs
// one disabled test case (the DISABLED_ prefix keeps worker bodies out of normal runs) with RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set, as a launcher would set them.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dist/launcher.h"
#include "tests/support/sanitizers.h"

extern char** environ;

namespace kestrel::testing {

// A TCP port that was free a moment ago (the kernel picks it; a clash with another job is
// unlikely).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A fresh empty directory under the system's temp directory.
inline std::filesystem::path temp_dir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("kestrel-" + tag + "-XXXXXX"));
  return ::mkdtemp(pattern.data());
}

struct RankResult {
  int status = 0;   // as from waitpid; -1 when it had to be killed at the deadline
  std::string log;  // its stdout and stderr
  // Exited 0 having really run its test case (a filter matching nothing would also exit 0).
  bool ok() const {
    return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
           log.find("[       OK ]") != std::string::npos;
  }
  bool killed_by(int sig) const {
    return status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == sig;
  }
};

// Runs `world` ranks, each executing the test `test` ("Suite.DISABLED_Name") of this binary, and
// waits for them; ranks still running at the deadline (longer in sanitizer builds) are killed
// (status -1).
inline std::vector<RankResult> run_ranks(const std::string& test, int world, int port,
                                         const std::vector<std::string>& extra_env = {},
                                         std::chrono::seconds deadline = std::chrono::seconds(20)) {
  const std::filesystem::path logs = temp_dir("ranks");
  const std::string exe = dist::current_executable().string();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {exe, "--gtest_filter=" + test,
                                     "--gtest_also_run_disabled_tests"};
    std::vector<std::string> env = extra_env;
    for (char** e = environ; *e; ++e)  // a worker runs its one case, whichever shard asked for it
      if (std::string_view(*e).rfind("GTEST_", 0) != 0) env.push_back(*e);
    for (std::string v : {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                          "LOCAL_RANK=" + std::to_string(r), std::string("MASTER_ADDR=127.0.0.1"),
                          "MASTER_PORT=" + std::to_string(port)})
      env.insert(env.begin(), v);  // first occurrence wins for getenv
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    for (auto& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const std::string log = (logs / ("rank" + std::to_string(r) + ".log")).string();
    pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<RankResult> results(world);
  std::vector<bool> done(world, false);
  const auto stop = std::chrono::steady_clock::now() + deadline * kSanitizerSlowdown;
  for (int left = world; left > 0;) {
    for (int r = 0; r < world; ++r) {
      if (done[r]) continue;
      if (::waitpid(pids[r], &results[r].status, WNOHANG) == pids[r]) done[r] = true, --left;
    }
    if (left > 0 && std::chrono::steady_clock::now() > stop) {
      for (int r = 0; r < world; ++r)
        if (!done[r])
          ::kill(pids[r], SIGKILL), ::waitpid(pids[r], nullptr, 0), results[r].status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) {
    std::ifstream in(logs / ("rank" + std::to_string(r) + ".log"));
    std::stringstream text;
    text << in.rdbuf();
    results[r].log = text.str();
  }
  std::filesystem::remove_all(logs);
  return results;
}

// The exit code (128 + signal when killed by one) of a child process, or nullopt when it had to be
// killed at the deadline (longer in sanitizer builds).
inline std::optional<int> wait_exit(pid_t pid, std::chrono::seconds deadline) {
  using Clock = std::chrono::steady_clock;
  const auto stop = Clock::now() + deadline * kSanitizerSlowdown;
  int status = 0;
  for (pid_t done; (done = ::waitpid(pid, &status, WNOHANG)) != pid;) {
    if (done < 0) return std::nullopt;
    if (Clock::now() > stop) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// For assertion messages: every rank's status and log.
inline std::string describe(const std::vector<RankResult>& results) {
  std::string s;
  for (size_t r = 0; r < results.size(); ++r) {
    const int st = results[r].status;
    s += "--- rank " + std::to_string(r) + ": " +
         (st < 0          ? std::string("killed at the deadline")
          : WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st))
                          : "signal " + std::to_string(WTERMSIG(st))) +
         "\n" + results[r].log + "\n";
  }
  return s;
}

}  // namespace kestrel::testing
