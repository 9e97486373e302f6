// `kestrel train --nproc-per-node N`: this process becomes a launcher that runs N local workers
// (the same program with the launcher flags removed) and supervises them, like torchrun.
//
// Workers get RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which
// dist/env.h picks up. Global rank 0 keeps the launcher's stdout/stderr; every other worker writes
// both to <log_dir>/rank<R>.log. SIGINT and SIGTERM are forwarded to the workers. When a worker
// fails, the others get SIGTERM (SIGKILL after a grace period) and the launcher reports which rank
// failed, with the tail of its log.
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
  int exit_code = 0;     // 0 when every worker succeeded
  int failed_rank = -1;  // the first worker seen failing, or -1
  std::string message;   // what happened, for the user (empty on success)
};

// Runs the workers and waits for all of them. Call it from the main thread before other threads
// exist: SIGINT, SIGTERM and SIGCHLD are blocked in the calling thread while workers run and are
// handled synchronously. The message is also printed to stderr.
LaunchResult launch_workers(const LaunchOptions& options);

// args minus --nproc-per-node, --nnodes, --node-rank, --master-addr and --master-port (as
// "--flag value" or "--flag=value"); the workers learn these values from their environment.
std::vector<std::string> strip_launcher_flags(const std::vector<std::string>& args);

// This program's path (from /proc/self/exe), to start workers with.
std::filesystem::path current_executable();

}  // namespace kestrel::dist
