#include "tensorboard/event_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "tensorboard/proto/event.pb.h"
#include "tensorboard/record_writer.h"

namespace kestrel::tensorboard {
namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event_file_name(const std::string& dir) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  char stem[400];
  std::snprintf(stem, sizeof stem, "events.out.tfevents.%010lld.%s.%d", static_cast<long long>(wall_time()), host,
                static_cast<int>(::getpid()));
  std::string path = (std::filesystem::path(dir) / stem).string();
  for (int n = 1; std::filesystem::exists(path); ++n) path = (std::filesystem::path(dir) / stem).string() + "." + std::to_string(n);
  return path;
}

tensorflow::Event event_at(int64_t step) {
  tensorflow::Event e;
  e.set_wall_time(wall_time());
  e.set_step(step);
  return e;
}

}  // namespace

EventWriter::EventWriter(const std::string& dir) {
  KESTREL_CHECK(std::filesystem::is_directory(dir), "TensorBoard: '", dir, "' is not a directory");
  records_ = std::make_unique<RecordWriter>(event_file_name(dir));
  tensorflow::Event e = event_at(0);
  e.set_file_version("brain.Event:2");
  records_->write(e.SerializeAsString());
}

EventWriter::~EventWriter() = default;

const std::string& EventWriter::path() const { return records_->path(); }

void EventWriter::add_scalar(const std::string& tag, float value, int64_t step) {
  tensorflow::Event e = event_at(step);
  tensorflow::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  records_->write(e.SerializeAsString());
}

void EventWriter::add_image(const std::string& tag, const std::string& encoded, int height, int width, int64_t step) {
  tensorflow::Event e = event_at(step);
  tensorflow::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  tensorflow::Summary::Image* image = v->mutable_image();
  image->set_height(height);
  image->set_width(width);
  image->set_colorspace(3);
  image->set_encoded_image_string(encoded);
  records_->write(e.SerializeAsString());
}

void EventWriter::restart_at(int64_t step) {
  tensorflow::Event e = event_at(step);
  e.mutable_session_log()->set_status(tensorflow::SessionLog::START);
  records_->write(e.SerializeAsString());
}

}  // namespace kestrel::tensorboard
