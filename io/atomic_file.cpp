#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace kestrel {
namespace {

// The rename is durable only once the directory entry is on disk. Best effort: some file
// systems refuse fsync on directories, and the data itself is already safe by then.
void sync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const int fd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string unique_temp_path(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return str(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
}

namespace {

// The "<pid>.<n>" unique_temp_path puts after ".tmp.": the pid, or -1 when `rest` is not that.
long temp_owner(const std::string& rest) {
  const size_t dot = rest.find('.');
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (dot == std::string::npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) return -1;
  return std::strtol(rest.c_str(), nullptr, 10);
}

}  // namespace

bool is_temp_name(const std::string& filename) {
  const size_t at = filename.rfind(".tmp.");
  return at != std::string::npos && at != 0 && temp_owner(filename.substr(at + 5)) >= 0;
}

std::vector<std::string> remove_dead_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = temp_owner(name.substr(prefix.size()));  // "<file>.tmp.<pid>.<n>" of this very file
    if (pid <= 0 || pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;  // one that cannot go stays: the new writer has a temporary of its own
    fs::remove_all(it->path(), ignored);
    if (!ignored) removed.push_back(it->path().string());
  }
  return removed;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(unique_temp_path(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, uint64_t n) {
  const char* in = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd_, in, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) fail("write");
    in += put;
    n -= static_cast<uint64_t>(put);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("flush");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename", str(" to '", path_, "'"));
  committed_ = true;
  sync_directory_of(path_);
}

void AtomicFile::fail(const std::string& action, const std::string& suffix) const {
  KESTREL_FAIL("cannot ", action, " '", tmp_, "'", suffix, ": ", std::strerror(errno),
               " (check that the directory exists and is writable, and the disk has space)");
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void publish_copy(const std::string& src, const std::string& dst) {
  const std::string tmp = unique_temp_path(dst);
  if (::link(src.c_str(), tmp.c_str()) == 0) {
    if (::rename(tmp.c_str(), dst.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      KESTREL_FAIL("cannot rename '", tmp, "' to '", dst, "': ", std::strerror(err));
    }
    sync_directory_of(dst);
    return;
  }
  std::ifstream in(src, std::ios::binary);
  KESTREL_CHECK(in, "cannot read '", src, "' to copy it to '", dst, "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_file_atomic(dst, bytes);
}

}  // namespace kestrel
