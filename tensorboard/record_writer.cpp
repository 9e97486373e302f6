#include "tensorboard/record_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "tensorboard/crc32c.h"

namespace kestrel::tensorboard {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

RecordWriter::RecordWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  KESTREL_CHECK(fd_ >= 0, "cannot create the event file '", path_, "': ", std::strerror(errno),
                "; check that its directory exists and is writable");
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordWriter::write(std::string_view data) {
  const std::string record = frame_record(data);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    KESTREL_CHECK(n > 0, "cannot write to the event file '", path_, "': ", std::strerror(errno),
                  "; free disk space, or train with --no-tensorboard");
    done += static_cast<size_t>(n);
  }
}

}  // namespace kestrel::tensorboard
