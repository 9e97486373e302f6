// Elastic restart (`kestrel train --nproc-per-node N --max-restarts K`, as torchrun's): after a
// worker failed, what the next attempt runs. Only decisions live here, from the failure and the
// run's files; dist/launcher.cpp starts and stops the processes.
//
// The next attempt resumes from the newest `last.safetensors` under the project that was written
// since the launch began (a checkpoint present before, left by an older run, is never taken); the
// worker command gets `--resume PATH` in place of any --resume / --resume-from it had. Without
// such a checkpoint the job starts over with its original command, pinned to the run directory
// the launcher predicted (`--name NAME --exist-ok`), so that it does not move on to exp2.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kestrel::dist {

struct LaunchResult;

// Every last.safetensors under `project` (recursively) with its modification time; empty when the
// directory does not exist.
using CheckpointTimes = std::map<std::filesystem::path, std::filesystem::file_time_type>;
CheckpointTimes find_checkpoints(const std::filesystem::path& project);

struct RestartOptions {
  std::vector<std::string> command;  // the first attempt's worker argv (launcher flags stripped)
  std::filesystem::path project;     // the --project directory, where checkpoints appear
  std::string run_name;              // the run directory under project (exp, exp2, ...)
  int max_restarts = 0;
};

struct RestartPlan {
  std::vector<std::string> command;  // the next attempt's worker argv
  std::filesystem::path checkpoint;  // what it resumes from; empty when it starts over
  int restart = 0;                   // 1 for the first restart
};

class RestartPolicy {
 public:
  // Notes the checkpoints that exist now: they belong to earlier runs (or, when resuming, to the
  // run as it was) and count only once rewritten. Construct it right before the first attempt.
  explicit RestartPolicy(RestartOptions options);

  // After an attempt ended: the next one, or nothing when the attempt succeeded, the launcher was
  // interrupted (SIGINT/SIGTERM) or all restarts are used. Counts the restart it returns.
  std::optional<RestartPlan> next(const LaunchResult& attempt);

  // The newest last.safetensors written since construction, or an empty path.
  std::filesystem::path newest_checkpoint() const;

  int restarts_used() const { return used_; }
  int max_restarts() const { return options_.max_restarts; }

 private:
  RestartOptions options_;
  CheckpointTimes before_;
  int used_ = 0;
};

// `command` resuming from `checkpoint`: every --resume, --resume PATH, --resume=PATH and
// --resume-from [=]PATH (dashes or underscores) replaced by one `--resume checkpoint`.
std::vector<std::string> resume_command(const std::vector<std::string>& command,
                                        const std::filesystem::path& checkpoint);

// `command` writing into project/run_name whether or not it exists: any --name and --exist-ok
// replaced by `--name run_name --exist-ok`.
std::vector<std::string> pinned_run_command(const std::vector<std::string>& command,
                                            const std::string& run_name);

}  // namespace kestrel::dist
