// Files that are either wholly old or wholly new: a writer fills a temporary beside `path`
// (unique_temp_path), flushes it to disk,
// renames it over `path` and flushes the directory, so a crash or kill at any moment leaves the
// previous version or the complete new one, never a torn or empty file. Everything the trainer
// writes (checkpoints, results.csv, yaml, plots) goes through here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

// A temporary name beside `path` that no other writer uses: `path.tmp.<pid>.<n>`, n counting
// this process's temporaries. Two processes (or threads) writing one file at once each fill
// their own temporary, and each rename installs a whole file; with one shared `path.tmp` one
// writer's rename takes the other's half-written bytes or finds its temporary gone.
std::string unique_temp_path(const std::string& path);

// True for a name unique_temp_path makes from some `path` (a writer's leftover after a kill).
bool is_temp_name(const std::string& filename);

// Removes the temporaries of `path` (files or folders named by unique_temp_path) that a process
// which no longer exists on this host left behind when it was killed; a live process's (a writer
// at work now) stay. Returns what it removed.
std::vector<std::string> remove_dead_temporaries(const std::string& path);

// A unique_temp_path, removed again unless commit() renamed it over the destination.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n);
  // fsync, rename over the destination, fsync the directory (so the rename itself is durable).
  void commit();

 private:
  [[noreturn]] void fail(const std::string& action, const std::string& suffix = "") const;
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, std::string_view bytes);

// Makes `dst` the same content as `src` atomically (a hard link renamed into place; a full copy
// where the file system has no hard links). `dst` keeps that content when `src` is later
// replaced by an atomic write, which makes a new inode.
void publish_copy(const std::string& src, const std::string& dst);

}  // namespace kestrel
