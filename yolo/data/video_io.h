// Videos and streams for `kestrel detect`, through OpenCV's videoio where this build has it (CMake
// finds it at configure time: -DKESTREL_VIDEOIO=OFF, or a machine without libopencv-videoio-dev,
// builds without; the bundle leaves it out). Without it, opening anything throws a message that
// says so and how to get the frames in another way.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace kestrel::yolo::data {

// Whether this build reads and writes videos.
bool video_io_available();

class VideoReader {
 public:
  // A video file, a stream URL, or a webcam index ("0"). Throws naming the source when it cannot
  // be opened. stride: keep every stride-th frame (the reference's --vid-stride).
  VideoReader(const std::string& source, int stride = 1);
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  // The next kept frame (BGR); false at the end.
  bool read(cv::Mat& frame);
  double fps() const;
  int width() const;
  int height() const;
  // Frames that read() will return (the container's count / stride); 0 when unknown (streams).
  int64_t frames() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class VideoWriter {
 public:
  // An MPEG-4 video (the reference's mp4v) of width x height frames at fps.
  VideoWriter(const std::string& path, double fps, int width, int height);
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  void write(const cv::Mat& bgr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::yolo::data
