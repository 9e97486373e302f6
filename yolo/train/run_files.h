// The files of a training run, shared by every task's trainer (detection's Trainer, the
// classifier's): the run directory, which rank 0 claims and locks (numbered as the reference's
// increment_path; on --resume the checkpoint's own, locked against a second resume) and every rank
// learns; weights/ with the checkpoints' paths (last, best, and last.prev, the checkpoint before
// last, kept while the run lasts so that a last damaged on disk leaves something to resume);
// checkpoints that cannot be written found at start-up; a run that fails at start-up leaving no
// directory of its own behind (nor the project folders its claim made); and a run's end (prev
// removed, last and best stripped to the EMA in float16, as the reference's strip_optimizer).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "yolo/common/run_dir_lock.h"
#include "yolo/train/rank_info.h"

namespace kestrel::yolo {

struct RunFilesOptions {
  std::string project, name;  // a new run's directory: project/name, numbered when it exists
  bool exist_ok = false;
  std::string resume_dir;     // a resumed run's own directory ("" for a new run)
  bool unclaimed = false;     // an --evolve generation: project/name as is, its lock held by evolve()
};

class RunFiles {
 public:
  // Collective where there are several ranks (every rank learns rank 0's directory).
  RunFiles(const RankInfo& rank, Device device, const RunFilesOptions& options);

  const std::string& save_dir() const { return save_dir_; }
  const std::string& weights_dir() const { return weights_dir_; }
  const std::string& last() const { return last_; }
  const std::string& best() const { return best_; }
  const std::string& prev() const { return prev_; }
  bool created() const { return created_; }

  // Before a new last is written: the current one becomes last.prev (published as a hard link
  // renamed into place, so last is never missing).
  void keep_previous() const;
  // A start-up failure (rank 0): removes the directory this run created and the project folders
  // its claim made (innermost first, only while empty). Files open in it must be closed first.
  // Returns a warning to say, "" when there is none.
  std::string discard();
  // The run has ended (rank 0): last.prev removed, last and best stripped. Returns each stripped
  // file with its new size in bytes.
  std::vector<std::pair<std::string, uint64_t>> finish();

 private:
  std::string save_dir_, weights_dir_, last_, best_, prev_;
  bool created_ = false;
  std::vector<std::filesystem::path> made_folders_;  // project folders the claim made, innermost first
  std::optional<RunDirLock> lock_;
};

}  // namespace kestrel::yolo
