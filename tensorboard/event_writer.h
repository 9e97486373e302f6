// A TensorBoard event file, as torch.utils.tensorboard's SummaryWriter writes one: the file
// `events.out.tfevents.<seconds>.<hostname>.<pid>` in a run directory (TensorBoard reads every
// file with "tfevents" in its name), TFRecords of tensorflow.Event protobufs, the first one
// carrying file_version "brain.Event:2". Scalars and encoded images only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace kestrel::tensorboard {

class RecordWriter;

class EventWriter {
 public:
  // Creates a new event file in `dir` (which must exist); a name already taken (a second writer
  // in the same second and process) gets a ".1", ".2", ... suffix.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  const std::string& path() const;
  void add_scalar(const std::string& tag, float value, int64_t step);
  // `encoded`: a PNG or JPEG file's bytes, `height` x `width` pixels, RGB.
  void add_image(const std::string& tag, const std::string& encoded, int height, int width, int64_t step);
  // A SessionLog START at `step`: TensorBoard then drops what earlier files of the run directory
  // logged at steps >= `step` (a resumed run redoes those epochs).
  void restart_at(int64_t step);

 private:
  std::unique_ptr<RecordWriter> records_;
};

}  // namespace kestrel::tensorboard
