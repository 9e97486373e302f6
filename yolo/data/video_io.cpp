#include "yolo/data/video_io.h"

#include <cctype>
#include <filesystem>

#include "base/error.h"

#if KESTREL_HAVE_VIDEOIO
#include <opencv2/videoio.hpp>
#endif

namespace kestrel::yolo::data {

#if KESTREL_HAVE_VIDEOIO

namespace {

bool is_index(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

bool video_io_available() { return true; }

struct VideoReader::Impl {
  cv::VideoCapture cap;
  int stride = 1;
};

VideoReader::VideoReader(const std::string& source, int stride) : impl_(std::make_unique<Impl>()) {
  KESTREL_CHECK(stride >= 1, "--vid-stride must be >= 1, got ", stride);
  impl_->stride = stride;
  if (is_index(source)) {
    impl_->cap.open(std::stoi(source));
  } else {
    // A path, not a URL, must exist: asking OpenCV would probe every backend, cameras included
    // (gPhoto2 scans the USB bus), before saying no.
    KESTREL_CHECK(source.find("://") != std::string::npos || std::filesystem::exists(source),
                  "cannot open video '", source, "': no such file");
    impl_->cap.open(source);
  }
  KESTREL_CHECK(impl_->cap.isOpened(), "cannot open video or stream '", source,
                "': check the path or URL (OpenCV videoio found no backend that reads it)");
}

VideoReader::~VideoReader() = default;

bool VideoReader::read(cv::Mat& frame) {
  for (int i = 0; i < impl_->stride; ++i)
    if (!impl_->cap.grab()) return false;
  return impl_->cap.retrieve(frame) && !frame.empty();
}

double VideoReader::fps() const { return impl_->cap.get(cv::CAP_PROP_FPS); }
int VideoReader::width() const { return static_cast<int>(impl_->cap.get(cv::CAP_PROP_FRAME_WIDTH)); }
int VideoReader::height() const { return static_cast<int>(impl_->cap.get(cv::CAP_PROP_FRAME_HEIGHT)); }
int64_t VideoReader::frames() const {
  const double n = impl_->cap.get(cv::CAP_PROP_FRAME_COUNT);
  return n > 0 ? static_cast<int64_t>(n / impl_->stride) : 0;
}

struct VideoWriter::Impl {
  cv::VideoWriter writer;
  std::string path;
};

VideoWriter::VideoWriter(const std::string& path, double fps, int width, int height)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->writer.open(path, cv::VideoWriter::fourcc('m', 'p', '4', 'v'), fps > 0 ? fps : 30,
                     cv::Size(width, height));
  KESTREL_CHECK(impl_->writer.isOpened(), "cannot write video ", path,
                ": OpenCV videoio has no MPEG-4 encoder here; use --nosave, or --save-txt alone");
}

VideoWriter::~VideoWriter() = default;

void VideoWriter::write(const cv::Mat& bgr) { impl_->writer.write(bgr); }

#else  // built without OpenCV videoio

namespace {

[[noreturn]] void no_video_io(const std::string& what) {
  KESTREL_FAIL(what, ": this kestrel was built without OpenCV videoio, which reads and writes "
               "videos and streams; install libopencv-videoio-dev and rebuild (CMake finds it), "
               "or extract the frames first (ffmpeg -i VIDEO frames/%06d.jpg) and pass the folder");
}

}  // namespace

bool video_io_available() { return false; }

struct VideoReader::Impl {};
VideoReader::VideoReader(const std::string& source, int) { no_video_io("cannot read '" + source + "'"); }
VideoReader::~VideoReader() = default;
bool VideoReader::read(cv::Mat&) { return false; }
double VideoReader::fps() const { return 0; }
int VideoReader::width() const { return 0; }
int VideoReader::height() const { return 0; }
int64_t VideoReader::frames() const { return 0; }

struct VideoWriter::Impl {};
VideoWriter::VideoWriter(const std::string& path, double, int, int) {
  no_video_io("cannot write '" + path + "'");
}
VideoWriter::~VideoWriter() = default;
void VideoWriter::write(const cv::Mat&) {}

#endif

}  // namespace kestrel::yolo::data
