// One run per run directory: a run holds an advisory lock (flock) on its directory for its whole
// life, so a second run pointed at the same directory (--exist-ok, or --resume of a run that is
// still going) is refused instead of interleaving its results.csv rows and checkpoints with the
// first one's. While it holds the lock, `<dir>/.kestrel.lock` says who (pid and host), for the
// refusal's message, and goes with the lock: a finished run leaves the directory as the reference
// does. The kernel drops the lock when the holder exits, however it ends (kill -9 included); the
// file a killed holder left is only information, replaced by the next holder and removed by it.
#pragma once
#include <optional>
#include <string>
#include <utility>

namespace kestrel::yolo {

class RunDirLock {
 public:
  static constexpr const char* kFileName = ".kestrel.lock";

  // The lock on `dir` (which must exist), or nullopt when another holder has it (another process,
  // or another open of this one); `holder` then says who (pid and host), as far as its lock file
  // tells.
  static std::optional<RunDirLock> try_acquire(const std::string& dir, std::string* holder = nullptr);
  // As try_acquire, but a held lock is an error naming the directory, the holder and `fix`.
  static RunDirLock acquire(const std::string& dir, const std::string& fix);

  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

  const std::string& dir() const { return dir_; }

 private:
  RunDirLock(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  std::string dir_;
  int fd_ = -1;
};

// Removes what writers killed mid-write left in `dir` and `dir/weights` (io/atomic_file's
// temporaries). Only the lock's holder may call it: no other writer of the run can be at work.
void remove_stale_temporaries(const RunDirLock& lock);

}  // namespace kestrel::yolo
