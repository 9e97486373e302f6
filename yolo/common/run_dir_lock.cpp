#include "yolo/common/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "io/atomic_file.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

// "pid 1234 on host h", from the holder's lock file. The holder writes it right after taking the
// lock, so a missing or empty file means it is between the two: worth a few short waits.
std::string describe_holder(const std::string& info) {
  for (int tries = 0; tries < 50; ++tries) {
    std::ifstream in(info);
    std::string line;
    if (std::getline(in, line) && !line.empty()) {
      const size_t space = line.find(' ');
      if (space == std::string::npos) return "pid " + line;
      return "pid " + line.substr(0, space) + " on host " + line.substr(space + 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "a process that has not written its pid yet";
}

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

}  // namespace

std::optional<RunDirLock> RunDirLock::try_acquire(const std::string& dir, std::string* holder) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  KESTREL_CHECK(fd >= 0, "cannot open the run directory '", dir, "' to lock it: ", std::strerror(errno),
                "; check that the directory exists");
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  const std::string info = (fs::path(dir) / kFileName).string();
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    KESTREL_CHECK(err == EWOULDBLOCK, "cannot lock '", dir, "': ", std::strerror(err),
                  "; the file system may not support flock: put --project on a local disk");
    if (holder) *holder = describe_holder(info);
    return std::nullopt;
  }
  // Who holds it, for a refusal's message: written atomically, removed when the lock goes.
  try {
    write_file_atomic(info, str(::getpid(), " ", host_name(), "\n"));
  } catch (const Error& e) {
    ::close(fd);
    KESTREL_FAIL("cannot write the run directory's lock file '", info, "': ", e.what(), "; check that the disk has space");
  }
  return RunDirLock(dir, fd);
}

RunDirLock RunDirLock::acquire(const std::string& dir, const std::string& fix) {
  std::string holder;
  std::optional<RunDirLock> lock = try_acquire(dir, &holder);
  KESTREL_CHECK(lock.has_value(), "run directory '", dir, "' is in use by another run (",
                holder, "; lock file ", (fs::path(dir) / kFileName).string(), "): ", fix);
  return std::move(*lock);
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : dir_(std::move(other.dir_)), fd_(other.fd_) {
  other.fd_ = -1;
}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      std::error_code ignored;
      fs::remove(fs::path(dir_) / kFileName, ignored);
      ::close(fd_);
    }
    dir_ = std::move(other.dir_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

// The lock file goes first, while the lock is still held (no new holder can have written its
// own); closing the directory's only descriptor then releases the flock.
RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  std::error_code ignored;  // a run directory removed under the lock takes the file with it
  fs::remove(fs::path(dir_) / kFileName, ignored);
  ::close(fd_);
}

void remove_stale_temporaries(const RunDirLock& lock) {
  std::error_code ec;
  for (const fs::path& folder : {fs::path(lock.dir()), fs::path(lock.dir()) / "weights"})
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
      if (is_temp_name(it->path().filename().string())) {
        std::error_code ignored;  // a leftover that cannot go stays; the run does not need it gone
        fs::remove(it->path(), ignored);
      }
}

}  // namespace kestrel::yolo
