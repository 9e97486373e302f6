// The elastic restart decisions, on files made here and failures described by hand: which
// checkpoint the next attempt resumes from, how its command changes, and how restarts are counted.
// The launcher's side (processes, logs, rendezvous) is in launcher_test.cpp.
#include "dist/restart_policy.h"

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>

#include "dist/launcher.h"
#include "tests/dist/spawn.h"

namespace kestrel::dist {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Command = std::vector<std::string>;

const Command kTrain = {"/bin/kestrel", "train", "--epochs", "3", "--project", "P"};

fs::path write_checkpoint(const fs::path& project, const std::string& run) {
  const fs::path path = project / run / "weights" / "last.safetensors";
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "checkpoint of " << run;
  return path;
}

LaunchResult failure(int exit_code = 137) {
  LaunchResult r;
  r.exit_code = exit_code;
  r.failed_rank = 1;
  return r;
}

Command plus(Command c, const Command& more) {
  c.insert(c.end(), more.begin(), more.end());
  return c;
}

class RestartPolicyTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(project_); }
  RestartPolicy policy(int max_restarts, Command command = kTrain) {
    return RestartPolicy({std::move(command), project_, "exp3", max_restarts});
  }
  const fs::path project_ = testing::temp_dir("restart");
};

TEST_F(RestartPolicyTest, ResumesFromTheNewestCheckpointOfThisRun) {
  // Older runs' checkpoints, one of them dated in the future: not this run's, never taken.
  const fs::path old = write_checkpoint(project_, "exp");
  fs::last_write_time(write_checkpoint(project_, "exp2"), fs::file_time_type::clock::now() + 1h);
  RestartPolicy p = policy(1);
  const fs::path first = write_checkpoint(project_, "exp3");
  fs::last_write_time(first, fs::file_time_type::clock::now() - 1s);
  const fs::path newer = write_checkpoint(project_, "exp3/sub");  // a second run of this launch
  EXPECT_EQ(p.newest_checkpoint(), newer);
  const auto plan = p.next(failure());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->checkpoint, newer);
  EXPECT_EQ(plan->command, plus(kTrain, {"--resume", newer.string()}));
  EXPECT_NE(plan->checkpoint, old);
}

TEST_F(RestartPolicyTest, ACheckpointRewrittenSinceTheLaunchCounts) {
  // `--resume runs/exp/...`: the resumed run rewrites its own last.safetensors.
  const fs::path resumed = write_checkpoint(project_, "exp");
  fs::last_write_time(resumed, fs::file_time_type::clock::now() - 1h);
  const Command command = plus(kTrain, {"--resume-from", resumed.string()});
  RestartPolicy p = policy(1, command);
  EXPECT_EQ(p.newest_checkpoint(), fs::path());
  fs::last_write_time(resumed, fs::file_time_type::clock::now());
  const auto plan = p.next(failure());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->checkpoint, resumed);
  EXPECT_EQ(plan->command, plus(kTrain, {"--resume", resumed.string()}));
}

TEST_F(RestartPolicyTest, WithoutACheckpointStartsOverInTheSameRunDirectory) {
  write_checkpoint(project_, "exp");  // an older run's
  RestartPolicy p = policy(1, plus(kTrain, {"--name", "exp", "--batch-size", "8"}));
  const auto plan = p.next(failure());
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->checkpoint.empty());
  EXPECT_EQ(plan->command, plus(kTrain, {"--batch-size", "8", "--name", "exp3", "--exist-ok"}));
}

TEST_F(RestartPolicyTest, AResumedJobWithoutANewCheckpointResumesAsBefore) {
  const Command command = plus(kTrain, {"--resume"});
  RestartPolicy p = policy(1, command);
  const auto plan = p.next(failure());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->command, command);
}

TEST_F(RestartPolicyTest, CountsRestartsUpToTheLimit) {
  RestartPolicy p = policy(2);
  for (int restart : {1, 2}) {
    const auto plan = p.next(failure());
    ASSERT_TRUE(plan) << restart;
    EXPECT_EQ(plan->restart, restart);
    EXPECT_EQ(p.restarts_used(), restart);
  }
  EXPECT_FALSE(p.next(failure()));
  EXPECT_EQ(p.restarts_used(), 2);
  RestartPolicy none = policy(0);
  EXPECT_FALSE(none.next(failure()));
}

TEST_F(RestartPolicyTest, NeverRestartsASuccessOrAnInterruptedLauncher) {
  RestartPolicy p = policy(3);
  EXPECT_FALSE(p.next(LaunchResult{}));
  LaunchResult interrupted = failure(128 + SIGTERM);
  interrupted.interrupt_signal = SIGTERM;
  EXPECT_FALSE(p.next(interrupted));
  interrupted.interrupt_signal = SIGINT;  // a worker failed, then the user pressed Ctrl-C
  interrupted.exit_code = 1;
  EXPECT_FALSE(p.next(interrupted));
  EXPECT_EQ(p.restarts_used(), 0);
}

TEST(RestartCommand, ReplacesEveryResumeSpelling) {
  const Command base = {"kestrel", "train", "--epochs", "3"};
  for (const Command& given : {Command{"--resume"}, Command{"--resume", "old.safetensors"},
                               Command{"--resume-from", "old.safetensors"},
                               Command{"--resume_from=old.safetensors"}}) {
    Command command = base;
    command.insert(command.begin() + 2, given.begin(), given.end());
    EXPECT_EQ(resume_command(command, "P/exp/weights/last.safetensors"),
              plus(base, {"--resume", "P/exp/weights/last.safetensors"}))
        << given.front();
  }
}

TEST(RestartCommand, PinsTheRunDirectory) {
  EXPECT_EQ(pinned_run_command({"kestrel", "train", "--exist_ok", "--name=run", "--noval"}, "run2"),
            (Command{"kestrel", "train", "--noval", "--name", "run2", "--exist-ok"}));
}

TEST(RestartCommand, FindsCheckpointsOnlyUnderTheProject) {
  const fs::path dir = testing::temp_dir("restart");
  EXPECT_TRUE(find_checkpoints(dir / "missing").empty());
  const fs::path a = write_checkpoint(dir / "project", "exp");
  write_checkpoint(dir / "elsewhere", "exp");
  std::ofstream(dir / "project" / "exp" / "weights" / "best.safetensors") << "not last";
  const CheckpointTimes found = find_checkpoints(dir / "project");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found.begin()->first, a);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kestrel::dist
