// `kestrel train --nproc-per-node N`: this process becomes a launcher that runs N local workers
// (the same program with the launcher flags removed) and supervises them, like torchrun.
//
// Workers get RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which
// dist/env.h picks up, and OMP_NUM_THREADS (their share of the cores) unless it is set. Global rank 0 keeps the launcher's stdout/stderr; every other worker writes
// both to <log_dir>/rank<R>.log (rank<R>.<launcher pid>.log while another live launch holds that
// name: the worker keeps its log locked). SIGINT and SIGTERM are forwarded to the workers. When a worker
// fails, the others get SIGTERM (SIGKILL after a grace period) and the launcher reports which rank
// failed, with the tail of its log.
//
// With a RestartPolicy (`--max-restarts K`) a failure that was no interrupt of the launcher is
// followed by a fresh start of all workers, with the command the policy gives (dist/
// restart_policy.h), up to K times. The failed rank's log is kept as rank<R>.attempt<k>.log. The
// new attempt rendezvouses on the same MASTER_PORT: every local worker of the previous attempt has
// been reaped by then, and the store's listening socket sets SO_REUSEADDR, so connections of the
// old job lingering in TIME_WAIT do not block it (and a firewall opened for the port keeps working).
// Workers get KESTREL_RESTART_COUNT (0, 1, ...). With several nodes each node's launcher restarts
// its own workers: a failure anywhere fails every node's workers (their peer is gone), so every
// launcher starts attempt k+1, and the store turns away ranks of another attempt (dist/store.h)
// until the master's host has restarted too. The nodes must share the project directory, so that
// every node resumes from the same checkpoint.
#pragma once
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace kestrel::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::filesystem::path log_dir;     // where ranks other than 0 write rank<R>.log
  std::vector<std::string> command;  // the worker's argv; command[0] is the program to run
  std::chrono::seconds grace{10};    // after SIGTERM, how long workers may take to exit
};

struct LaunchResult {
  int exit_code = 0;         // 0 when every worker succeeded
  int failed_rank = -1;      // the first worker seen failing, or -1
  int interrupt_signal = 0;  // SIGINT or SIGTERM when the launcher received one, else 0
  int restarts = 0;          // how many restarts preceded this (the last) attempt
  std::string message;       // what happened, for the user (empty on success)
};

class RestartPolicy;

// Runs the workers and waits for all of them, restarting them as `restarts` decides (null: never).
// Call it from the main thread before other threads exist: SIGINT, SIGTERM and SIGCHLD are blocked
// in the calling thread while it runs and are handled synchronously. Each attempt's message is
// also printed to stderr, as is each restart.
LaunchResult launch_workers(const LaunchOptions& options, RestartPolicy* restarts = nullptr);

// args minus --nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port and
// --max-restarts (as "--flag value" or "--flag=value", dashes or underscores); the workers learn
// the first five from their environment.
std::vector<std::string> strip_launcher_flags(const std::vector<std::string>& args);

// OMP_NUM_THREADS a worker gets when the environment sets none: the node's cores shared among its
// local workers (at least 1).
int omp_threads_per_worker(int nproc_per_node);

// This program's path (from /proc/self/exe), to start workers with.
std::filesystem::path current_executable();

}  // namespace kestrel::dist
