#include "dist/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "dist/restart_policy.h"

extern char** environ;

namespace kestrel::dist {
namespace {

using Clock = std::chrono::steady_clock;

struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::filesystem::path log;  // empty for rank 0 (inherits the terminal)
};

// Restores the calling thread's signal mask when the launcher returns or throws.
class SignalBlock {
 public:
  explicit SignalBlock(const sigset_t& set) { pthread_sigmask(SIG_BLOCK, &set, &previous_); }
  ~SignalBlock() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  const sigset_t& previous() const { return previous_; }

 private:
  sigset_t previous_;
};

}  // namespace

int omp_threads_per_worker(int nproc_per_node) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, nproc_per_node));
}

namespace {

std::vector<std::string> worker_environment(const LaunchOptions& o, int rank, int local_rank, int restarts) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"KESTREL_RESTART_COUNT", std::to_string(restarts)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)}};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : ours) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  // Each worker's compute threads (OpenMP: oneDNN and the CPU kernels) share the node's cores
  // with the other local workers, unless the user sized them: N teams of all cores would spin
  // against each other. (torchrun sets 1; a share keeps CPU training parallel inside a rank.)
  if (!std::getenv("OMP_NUM_THREADS"))
    env.push_back("OMP_NUM_THREADS=" + std::to_string(omp_threads_per_worker(o.nproc_per_node)));
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The worker's log, locked (flock) for as long as the worker holds it as stdout and stderr: two
// launches into one project (one of them refused by the run directory's lock, say) would
// otherwise truncate and interleave each other's rank<R>.log. A log a live launch holds is left
// alone, and this launch writes rank<R>.<launcher pid>.log instead (w.log says which).
int open_rank_log(Worker& w) {
  for (const bool fallback : {false, true}) {
    if (fallback) w.log = w.log.parent_path() / str("rank", w.rank, ".", ::getpid(), ".log");
    const int fd = ::open(w.log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    KESTREL_CHECK(fd >= 0, "launcher: cannot create the log file ", w.log.string(), " for rank ", w.rank,
                  ": ", std::strerror(errno), "; check that the project directory is writable");
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {  // no flock here: write anyway
      KESTREL_CHECK(::ftruncate(fd, 0) == 0, "launcher: cannot empty the log file ", w.log.string(), ": ",
                    std::strerror(errno));
      return fd;
    }
    ::close(fd);
  }
  KESTREL_FAIL("launcher: the log files ", w.log.string(), " and rank", w.rank, ".log beside it are ",
               "held by other launches; remove stale launches or use another --project");
}

// Starts one worker. Between fork and exec the child only makes async-signal-safe calls.
pid_t spawn(const LaunchOptions& o, const std::vector<std::string>& command, int restarts, Worker& w,
            const sigset_t& original_mask) {
  std::vector<std::string> args = command, env = worker_environment(o, w.rank, w.local_rank, restarts);
  std::vector<char*> argv = c_strings(args), envp = c_strings(env);
  const std::string exec_failed = "kestrel launcher: cannot execute " + command[0] + "\n";
  const int log_fd = w.log.empty() ? -1 : open_rank_log(w);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    // A launcher killed outright (SIGKILL) must not leave orphaned workers holding GPUs.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    pthread_sigmask(SIG_SETMASK, &original_mask, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ssize_t ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    (void)ignored;
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  KESTREL_CHECK(pid > 0, "launcher: fork() failed for rank ", w.rank, ": ", std::strerror(errno));
  return pid;
}

std::string log_tail(const std::filesystem::path& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.erase(lines.begin());
  }
  std::string out;
  for (const std::string& l : lines) out += "  | " + l + "\n";
  return out;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return str("exited with code ", WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return str("was killed by signal ", sig, " (", ::strsignal(sig), ")");
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The signals blocked for the whole launch (all attempts) and taken synchronously in run_attempt.
sigset_t launcher_signals() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&handled, s);
  return handled;
}

struct Attempt {
  LaunchResult result;               // message without the failed rank's log
  std::filesystem::path failed_log;  // the failed rank's log; empty for rank 0 or no failure
};

// The local workers of one attempt (rank 0's output goes to the launcher's, the others' to
// rank<R>.log), and the stop in progress: a signal now, SIGKILL once the grace period is over.
struct WorkerGroup {
  std::vector<Worker> workers;
  std::chrono::seconds grace;
  bool stopping = false;
  Clock::time_point kill_at;

  explicit WorkerGroup(const LaunchOptions& o) : workers(o.nproc_per_node), grace(o.grace) {
    for (int l = 0; l < o.nproc_per_node; ++l) {
      workers[l].local_rank = l;
      workers[l].rank = o.node_rank * o.nproc_per_node + l;
      if (workers[l].rank != 0) {
        std::filesystem::create_directories(o.log_dir.empty() ? "." : o.log_dir);
        workers[l].log = o.log_dir / str("rank", workers[l].rank, ".log");
      }
    }
  }
  void signal_running(int sig) {
    for (Worker& w : workers)
      if (w.running) ::kill(w.pid, sig);
  }
  void stop_all(int sig) {
    signal_running(sig);
    if (!stopping) kill_at = Clock::now() + grace;
    stopping = true;
  }
  bool any_running() const {
    for (const Worker& w : workers)
      if (w.running) return true;
    return false;
  }
  int running_count() const {
    int n = 0;
    for (const Worker& w : workers) n += w.running;
    return n;
  }
};

// Reaps every exited worker and returns the failed one to blame (nullptr: none, or `blame` off).
// Of several failed since the last look, one killed by a signal is the likely cause (the others
// lose their peers and then exit with an error).
Worker* reap_exited(WorkerGroup& group, bool blame, int* culprit_status) {
  Worker* culprit = nullptr;
  for (Worker& w : group.workers) {
    int status = 0;
    if (!w.running || ::waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
    w.running = false;
    const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || !blame) continue;
    if (!culprit || (WIFEXITED(*culprit_status) && WIFSIGNALED(status))) {
      culprit = &w;
      *culprit_status = status;
    }
  }
  return culprit;
}

// Starts every local worker with `command` and waits until all have exited: on a failure the
// others are stopped (SIGTERM, then SIGKILL), a SIGINT or SIGTERM to the launcher is forwarded.
Attempt run_attempt(const LaunchOptions& o, const std::vector<std::string>& command, int restarts,
                    const sigset_t& handled, const sigset_t& original_mask) {
  WorkerGroup group(o);
  for (Worker& w : group.workers) {
    try {
      w.pid = spawn(o, command, restarts, w, original_mask);
      w.running = true;
    } catch (...) {
      group.stop_all(SIGKILL);
      for (Worker& v : group.workers)
        if (v.running) ::waitpid(v.pid, nullptr, 0);
      throw;
    }
  }

  Attempt attempt;
  LaunchResult& result = attempt.result;
  int interrupted = 0;
  while (group.any_running()) {
    const timespec tick{0, 100'000'000};
    const int sig = ::sigtimedwait(&handled, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      if (!interrupted) interrupted = sig;
      group.stop_all(sig);
    }
    int status = 0;
    if (Worker* culprit = reap_exited(group, !interrupted && result.failed_rank < 0, &status)) {
      result.failed_rank = culprit->rank;
      result.exit_code = exit_code_of(status);
      attempt.failed_log = culprit->log;
      result.message = str("rank ", culprit->rank, " (local rank ", culprit->local_rank, ", pid ", culprit->pid, ") ",
                           describe_exit(status), "; stopping the other ", group.running_count(), " local worker(s)");
      group.stop_all(SIGTERM);
    }
    if (group.stopping && Clock::now() >= group.kill_at) group.signal_running(SIGKILL);
  }
  // Consume signals that arrived after the last worker exited: they still count as an interrupt
  // (no restart follows), and unblocking them later must not kill us.
  const timespec zero{0, 0};
  for (int sig; (sig = ::sigtimedwait(&handled, nullptr, &zero)) > 0;)
    if ((sig == SIGINT || sig == SIGTERM) && !interrupted) interrupted = sig;

  result.interrupt_signal = interrupted;
  if (interrupted && result.failed_rank < 0) {
    result.exit_code = 128 + interrupted;
    result.message = str("received ", interrupted == SIGINT ? "SIGINT" : "SIGTERM",
                         ": forwarded it to the workers, which have stopped");
  }
  return attempt;
}

// Renames a failed rank's log so that the next attempt's rank<R>.log does not overwrite it.
std::filesystem::path keep_log(const std::filesystem::path& log, int rank, int attempt) {
  const std::filesystem::path kept = log.parent_path() / str("rank", rank, ".attempt", attempt, ".log");
  std::error_code ec;
  std::filesystem::rename(log, kept, ec);
  if (!ec) return kept;
  std::cerr << "kestrel launcher: warning: cannot keep " << log.string() << " as " << kept.string()
            << " (" << ec.message() << "); the next attempt overwrites it" << std::endl;
  return log;
}

}  // namespace

std::vector<std::string> strip_launcher_flags(const std::vector<std::string>& args) {
  static const char* const kFlags[] = {"--nproc-per-node", "--nnodes",      "--node-rank",
                                       "--master-addr",    "--master-port", "--max-restarts"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    // `kestrel train` reads --nproc_per_node as --nproc-per-node: strip both spellings.
    std::string flag = args[i].substr(0, args[i].find('='));
    if (flag.rfind("--", 0) == 0) std::replace(flag.begin() + 2, flag.end(), '_', '-');
    bool launcher_flag = false;
    for (const char* f : kFlags) launcher_flag |= flag == f;
    if (!launcher_flag) out.push_back(args[i]);
    else if (args[i].find('=') == std::string::npos) ++i;  // its value is the next word
  }
  return out;
}

std::filesystem::path current_executable() {
  return std::filesystem::read_symlink("/proc/self/exe");
}

LaunchResult launch_workers(const LaunchOptions& o, RestartPolicy* restarts) {
  KESTREL_CHECK(o.nproc_per_node >= 1, "--nproc-per-node must be at least 1, got ",
                o.nproc_per_node);
  KESTREL_CHECK(o.nnodes >= 1, "--nnodes must be at least 1, got ", o.nnodes);
  KESTREL_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank must lie in [0, ",
                o.nnodes, "), got ", o.node_rank);
  KESTREL_CHECK(o.master_port > 0 && o.master_port < 65536,
                "--master-port must lie in 1..65535, got ", o.master_port);
  KESTREL_CHECK(!o.command.empty(), "launcher: no worker command given");
  const int max_restarts = restarts ? restarts->max_restarts() : 0;

  const sigset_t handled = launcher_signals();
  SignalBlock block(handled);
  std::vector<std::string> command = o.command;
  for (int number = 1;; ++number) {
    Attempt attempt = run_attempt(o, command, number - 1, handled, block.previous());
    LaunchResult& r = attempt.result;
    r.restarts = number - 1;
    const std::optional<RestartPlan> plan = restarts ? restarts->next(r) : std::nullopt;
    if (r.failed_rank >= 0) {
      std::filesystem::path log = attempt.failed_log;
      if (plan && !log.empty()) log = keep_log(log, r.failed_rank, number);
      const std::string tail = log.empty() ? "" : log_tail(log, 20);
      r.message += log.empty()  ? std::string("; its output is above")
                   : tail.empty() ? str("; its log ", log.string(), " is empty")
                                  : str("; its log is ", log.string(), ", ending with:\n", tail);
      if (!plan && max_restarts > 0 && !r.interrupt_signal)
        r.message += str(r.message.back() == '\n' ? "kestrel launcher: " : "; ", "all ",
                         max_restarts, " restart(s) used; giving up");
    }
    if (!r.message.empty()) std::cerr << "kestrel launcher: " << r.message << std::endl;
    if (!plan) return r;
    std::cerr << "kestrel launcher: restart " << plan->restart << "/" << max_restarts << ": "
              << (plan->checkpoint.empty() ? "no checkpoint of this run yet, starting over"
                                           : "resuming from " + plan->checkpoint.string())
              << std::endl;
    command = plan->command;
  }
}

}  // namespace kestrel::dist
