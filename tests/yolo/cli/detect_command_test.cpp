// `kestrel detect` on a folder holding unreadable files: each is named in a warning and skipped,
// the others are still detected, and a summary counts the skipped ones.
#include <filesystem>
#include <fstream>

#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_detect_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

cv::Mat picture() {
  cv::Mat m(48, 64, CV_8UC3);
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x) m.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 4, y * 5, 90);
  return m;
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DetectCommand, UnreadableFilesInAFolderAreSkippedAndCounted) {
  const fs::path dir = scratch("skip");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run_kestrel("model --cfg models/yolov5n.yaml --nc 2 --save " + weights).code, 0);
  const fs::path images = dir / "images";
  fs::create_directories(images);
  kestrel::yolo::data::write_jpeg((images / "a_good.jpg").string(), picture());
  write_bytes(images / "b_text.jpg", "not an image");
  write_bytes(images / "c_empty.png", "");
  kestrel::yolo::data::write_png((images / "d_good.png").string(), picture());
  const std::string detect = "detect --weights " + weights + " --cfg models/yolov5n.yaml --nc 2 --img-size 64" +
                             " --device cpu --project " + (dir / "runs").string() + " --source ";

  const CliResult r = run_kestrel(detect + images.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "WARNING: skipping " + (images / "b_text.jpg").string() + ": ")) << r.out;
  EXPECT_TRUE(mentions(r.out, "WARNING: skipping " + (images / "c_empty.png").string() + ": ")) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 1/4 " + (images / "a_good.jpg").string())) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 4/4 " + (images / "d_good.png").string())) << r.out;
  EXPECT_TRUE(mentions(r.out, "2 files skipped")) << r.out;
  EXPECT_TRUE(fs::exists(dir / "runs/exp/a_good.jpg"));
  EXPECT_TRUE(fs::exists(dir / "runs/exp/d_good.png"));

  // Nothing readable at all is an error (exit 1), not an empty success.
  fs::remove(images / "a_good.jpg");
  fs::remove(images / "d_good.png");
  const CliResult none = run_kestrel(detect + images.string());
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_TRUE(mentions(none.out, "could be read (2 files skipped)")) << none.out;
  fs::remove_all(dir);
}
