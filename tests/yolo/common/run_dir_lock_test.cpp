// The run directory's lock: one holder at a time, across processes and across opens of one
// process; a refusal names the holder's pid (as written in the lock file) and the fix; the lock
// goes with its holder, however the holder ends (kill -9 included), and its file with it (a
// killed holder's is replaced by the next one's);
// moving a lock keeps it held; remove_stale_temporaries removes killed writers' temporaries from
// the run directory and weights/ and nothing else.
#include "yolo/common/run_dir_lock.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "tests/support/testing.h"

using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

class RunDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kestrel_run_dir_lock_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  // A child process that takes the lock on dir_, says so through a pipe, and waits to be killed.
  pid_t child_holding_lock() {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      std::optional<RunDirLock> lock = RunDirLock::try_acquire(dir_.string());
      const char ok = lock ? '1' : '0';
      if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char ok = 0;
    EXPECT_EQ(::read(ready[0], &ok, 1), 1);
    ::close(ready[0]);
    EXPECT_EQ(ok, '1') << "the child could not take the lock";
    children_.push_back(pid);
    return pid;
  }

  fs::path dir_;
  std::vector<pid_t> children_;
};

// The message of RunDirLock::acquire's refusal, or "" when it took the lock.
std::string refusal(const fs::path& dir) {
  try {
    RunDirLock::acquire(dir.string(), "choose another --name");
  } catch (const kestrel::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_F(RunDirLockTest, OneHolderInThisProcessAndTheRefusalNamesIt) {
  std::optional<RunDirLock> held = RunDirLock::try_acquire(dir_.string());
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->dir(), dir_.string());
  EXPECT_TRUE(fs::exists(dir_ / RunDirLock::kFileName));

  // A second open of the lock file is refused even in the same process (flock is per open file).
  std::string holder;
  EXPECT_FALSE(RunDirLock::try_acquire(dir_.string(), &holder).has_value());
  EXPECT_NE(holder.find("pid " + std::to_string(::getpid())), std::string::npos) << holder;
  const std::string message = refusal(dir_);
  EXPECT_NE(message.find("pid " + std::to_string(::getpid())), std::string::npos) << message;
  EXPECT_NE(message.find(dir_.string()), std::string::npos) << message;
  EXPECT_NE(message.find("choose another --name"), std::string::npos) << message;

  // Moved, it is still held (and its file kept); released, the next taker gets it, and a released
  // lock leaves no file behind (issue 41: a finished run's directory is the reference's).
  RunDirLock moved = std::move(*held);
  held.reset();
  EXPECT_FALSE(RunDirLock::try_acquire(dir_.string()).has_value());
  EXPECT_TRUE(fs::exists(dir_ / RunDirLock::kFileName));
  { RunDirLock gone = std::move(moved); }
  EXPECT_FALSE(fs::exists(dir_ / RunDirLock::kFileName));
  EXPECT_TRUE(RunDirLock::try_acquire(dir_.string()).has_value());
  EXPECT_FALSE(fs::exists(dir_ / RunDirLock::kFileName));
}

TEST_F(RunDirLockTest, AnotherProcessIsRefusedWithTheHoldersPidUntilTheHolderDies) {
  const pid_t child = child_holding_lock();
  const std::string message = refusal(dir_);
  EXPECT_NE(message.find("pid " + std::to_string(child) + " on host "), std::string::npos) << message;

  // kill -9 gives the lock back; the pid left in the file does not block the next run.
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  children_.clear();
  std::optional<RunDirLock> lock = RunDirLock::try_acquire(dir_.string());
  ASSERT_TRUE(lock.has_value());
  std::ifstream in(dir_ / RunDirLock::kFileName);
  std::string pid;
  in >> pid;
  EXPECT_EQ(pid, std::to_string(::getpid())) << "the new holder's pid replaces the dead one's";
}

TEST_F(RunDirLockTest, AMissingDirectoryIsAnErrorNamingIt) {
  const fs::path missing = dir_ / "no" / "such";
  try {
    RunDirLock::try_acquire(missing.string());
    ADD_FAILURE() << "no error";
  } catch (const kestrel::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
}

TEST_F(RunDirLockTest, RemoveStaleTemporariesKeepsEverythingElse) {
  fs::create_directories(dir_ / "weights");
  const std::vector<fs::path> stale = {
      kestrel::unique_temp_path((dir_ / "weights" / "last.safetensors").string()),
      dir_ / "results.csv.tmp.99999.3"};
  const std::vector<fs::path> kept = {dir_ / "weights" / "last.safetensors", dir_ / "results.csv",
                                      dir_ / "notes.tmp", dir_ / "weights" / "best.safetensors.tmp"};
  for (const auto& p : stale) std::ofstream(p) << "partial";
  for (const auto& p : kept) std::ofstream(p) << "data";
  RunDirLock lock = RunDirLock::acquire(dir_.string(), "unused");
  remove_stale_temporaries(lock);
  for (const auto& p : stale) EXPECT_FALSE(fs::exists(p)) << p;
  for (const auto& p : kept) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_TRUE(fs::exists(dir_ / RunDirLock::kFileName));
}
