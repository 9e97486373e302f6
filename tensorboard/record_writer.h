// TFRecord framing, the container of TensorBoard event files:
//   uint64 length | uint32 masked_crc32c(the 8 length bytes) | data | uint32 masked_crc32c(data)
// all little-endian.
#pragma once
#include <string>
#include <string_view>

namespace kestrel::tensorboard {

std::string frame_record(std::string_view data);

// Appends framed records to a new file (never an existing one: O_EXCL). Each record goes to the
// file in one write() as it comes, so a reader following the file (TensorBoard does) sees it at
// once; a process killed mid-write leaves at most a torn last record, which readers skip.
class RecordWriter {
 public:
  explicit RecordWriter(std::string path);  // throws if `path` exists or cannot be created
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  void write(std::string_view data);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace kestrel::tensorboard
