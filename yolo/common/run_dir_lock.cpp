#include "yolo/common/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "io/atomic_file.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

std::string read_fd(int fd) {
  std::string text;
  char buf[256];
  for (off_t at = 0;;) {
    const ssize_t got = ::pread(fd, buf, sizeof buf, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return text;
    text.append(buf, static_cast<size_t>(got));
    at += got;
  }
}

// "pid 1234 on host h". The holder writes its line right after taking the lock, so an empty file
// means it is between the two: worth a few short waits.
std::string describe_holder(int fd) {
  for (int tries = 0; tries < 50; ++tries) {
    std::string line = read_fd(fd);
    const size_t end = line.find('\n');
    if (end != std::string::npos) {
      line.resize(end);
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
  const std::string path = (fs::path(dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  KESTREL_CHECK(fd >= 0, "cannot open the run directory's lock file '", path, "': ", std::strerror(errno),
                "; check that the directory exists and is writable");
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK && holder) *holder = describe_holder(fd);
    ::close(fd);
    KESTREL_CHECK(err == EWOULDBLOCK, "cannot lock '", path, "': ", std::strerror(err),
                  "; the file system may not support flock: put --project on a local disk");
    return std::nullopt;
  }
  const std::string line = str(::getpid(), " ", host_name(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(fd);
    KESTREL_FAIL("cannot write the lock file '", path, "': ", std::strerror(err),
                 "; check that the disk has space");
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
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(other.dir_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

// Closing the only descriptor of the open file releases the flock.
RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
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
