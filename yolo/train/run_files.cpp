#include "yolo/train/run_files.h"

#include "io/atomic_file.h"
#include "yolo/common/run_dir.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/rank_collectives.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;

RunFiles::RunFiles(const RankInfo& rank, Device device, const RunFilesOptions& o) {
  if (rank.main()) {
    const std::string named = (fs::path(o.project) / o.name).string();
    if (!o.resume_dir.empty()) {
      save_dir_ = o.resume_dir;
      lock_ = RunDirLock::acquire(save_dir_, "that run is still training; let it finish or stop it "
                                             "(Ctrl-C) before resuming");
    } else if (o.unclaimed) {
      save_dir_ = named;
    } else {
      for (fs::path p = fs::path(o.project); !p.empty() && !fs::exists(p); p = p.parent_path()) made_folders_.push_back(p);
      ClaimedRunDir claim = claim_run_dir(named, o.exist_ok);
      save_dir_ = claim.path;
      created_ = claim.created;
      lock_ = std::move(claim.lock);
    }
    if (lock_) remove_stale_temporaries(*lock_);
  }
  save_dir_ = broadcast_string(rank, device, save_dir_);
  weights_dir_ = save_dir_ + "/weights";
  last_ = weights_dir_ + "/last.safetensors";
  best_ = weights_dir_ + "/best.safetensors";
  prev_ = weights_dir_ + "/last.prev.safetensors";
  if (rank.main()) {
    fs::create_directories(weights_dir_);
    check_checkpoint_folder(weights_dir_);
  }
}

void RunFiles::keep_previous() const {
  if (fs::exists(last_)) publish_copy(last_, prev_);
}

std::string RunFiles::discard() {
  if (!created_) return "";
  std::error_code ec;
  fs::remove_all(save_dir_, ec);
  const std::string warning = ec ? "WARNING: cannot remove the new run directory " + save_dir_ + ": " + ec.message() : "";
  for (const fs::path& folder : made_folders_) fs::remove(folder, ec);
  lock_.reset();
  created_ = false;
  return warning;
}

std::vector<std::pair<std::string, uint64_t>> RunFiles::finish() {
  std::error_code ec;
  fs::remove(prev_, ec);  // the run has ended: last is what resumes or fine-tunes it
  std::vector<std::pair<std::string, uint64_t>> stripped;
  for (const std::string& path : {last_, best_})
    if (fs::exists(path)) stripped.emplace_back(path, strip_checkpoint(path));
  return stripped;
}

}  // namespace kestrel::yolo
