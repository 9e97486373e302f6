// Videos through OpenCV videoio where this build has it: frames written as MPEG-4 come back with
// their size, rate and count, --vid-stride keeps every n-th; without videoio, opening one says
// what is missing.
#include "yolo/data/video_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  fs::path p = fs::temp_directory_path() / ("kestrel_video_io_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_clip(const std::string& path, int frames) {
  VideoWriter w(path, 10, 64, 48);
  for (int i = 0; i < frames; ++i) w.write(cv::Mat(48, 64, CV_8UC3, cv::Scalar(i * 40, 90, 200 - i * 30)));
}

}  // namespace

TEST(VideoIo, FramesComeBackWithTheirSizeRateAndStride) {
  if (!video_io_available()) GTEST_SKIP() << "built without OpenCV videoio";
  const fs::path dir = scratch();
  const std::string clip = (dir / "clip.mp4").string();
  write_clip(clip, 5);
  VideoReader all(clip);
  EXPECT_EQ(all.width(), 64);
  EXPECT_EQ(all.height(), 48);
  EXPECT_NEAR(all.fps(), 10.0, 1e-6);
  EXPECT_EQ(all.frames(), 5);
  int n = 0;
  cv::Mat frame;
  while (all.read(frame)) {
    EXPECT_EQ(frame.size(), cv::Size(64, 48));
    ++n;
  }
  EXPECT_EQ(n, 5);
  VideoReader every_second(clip, 2);
  EXPECT_EQ(every_second.frames(), 2);
  n = 0;
  while (every_second.read(frame)) ++n;
  EXPECT_EQ(n, 2);
  try {
    VideoReader missing((dir / "missing.mp4").string());
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open video '" + (dir / "missing.mp4").string() + "': no such file"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(VideoIo, WithoutVideoioOpeningExplains) {
  if (video_io_available()) GTEST_SKIP() << "built with OpenCV videoio";
  try {
    VideoReader reader("clip.mp4");
    ADD_FAILURE() << "opened a video without videoio";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without OpenCV videoio"), std::string::npos) << e.what();
  }
  try {
    VideoWriter writer("out.mp4", 30, 64, 48);
    ADD_FAILURE() << "wrote a video without videoio";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("install libopencv-videoio-dev"), std::string::npos) << e.what();
  }
}
