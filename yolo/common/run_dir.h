// The run directory as the reference lays it out: runs/train/exp, exp2, ... with weights/,
// hyp.yaml, opt.yaml and results.csv (the reference's columns and number format).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "yolo/common/run_dir_lock.h"

namespace kestrel::yolo {

// project/name if it does not exist (or exist_ok), else project/name2, name3, ... Not created:
// only a guess of what claim_run_dir will take, as another process may take that name first.
std::string increment_path(const std::string& path, bool exist_ok = false);

// A run directory this process owns until `lock` goes.
struct ClaimedRunDir {
  std::string path;
  RunDirLock lock;
  bool created;  // made by this claim (so a run that fails at start-up may remove it)
};

// The reference's increment_path numbering, made safe for runs that start together: each name
// (path, path2, path3, ...) is tried with mkdir, which exactly one process wins, and the winner
// locks it; a name another process made, or made and locked first, moves on to the next number.
// With exist_ok the directory is path itself (made if missing), and a run holding its lock is an
// error naming that run's pid, with the fix.
ClaimedRunDir claim_run_dir(const std::string& path, bool exist_ok);

// One row per epoch; the header is written with the first row, as the reference does ('%20s'
// names, '%20.5g' values, comma separated; another task's columns at its own width, e.g.
// segment/train.py's GenericLogger: '%23s', '%23.5g'). Every write is atomic (io/atomic_file.h).
class ResultsCsv {
 public:
  static const std::vector<std::string>& columns();  // detection's, without "epoch"
  explicit ResultsCsv(std::string path) : path_(std::move(path)), columns_(&columns()) {}
  // `columns` must outlive this object (a task's static list).
  ResultsCsv(std::string path, const std::vector<std::string>& columns, int width)
      : path_(std::move(path)), columns_(&columns), width_(width) {}
  void append(int epoch, const std::vector<double>& values) const;
  // Drops the rows of epochs after `last_epoch` (a resumed run redoes them); returns how many.
  int keep_through(int last_epoch) const;
  const std::string& path() const { return path_; }

 private:
  std::string header_line() const;
  std::string path_;
  const std::vector<std::string>* columns_;
  int width_ = 20;
};

// Checkpoints are first written at an epoch's end: a folder they cannot be written to is found at
// start-up instead, by writing and removing a file there as a checkpoint is written. Throws naming
// the folder and the fix.
void check_checkpoint_folder(const std::string& weights_dir);

// "key: value" lines of (name, text) pairs in order: opt.yaml.
void write_yaml_pairs(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace kestrel::yolo
