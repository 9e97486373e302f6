// --weights by release name in detect and export, fetched from a loopback mirror
// (tests/support/http_server) serving tests/data/yolov5n_coco80.pt (a yolov5n for COCO's 80
// classes, made by the reference), and used as it is once there; offline, the error names the
// address, the reason and what to do by hand, leaving nothing behind. Training from an empty
// folder, dataset included, is tests/yolo/cli/download_train_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/cli.h"
#include "tests/support/http_server.h"
#include "tests/yolo/cli/empty_folder_run.h"
#include "yolo/data/image_codec.h"
#include "yolo/model/weights_file.h"

namespace {

namespace fs = std::filesystem;
using kestrel::testing::LoopbackHttpServer;

class DownloadCommand : public kestrel::testing::EmptyFolderRun {
 protected:
  DownloadCommand() : EmptyFolderRun("download_cli") {}
};

TEST_F(DownloadCommand, DetectAndExportFetchTheirWeightsToo) {
  server_.serve("/mirror/yolov5s.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
  cv::Mat image(64, 96, CV_8UC3, cv::Scalar(10, 200, 90));
  kestrel::yolo::data::write_jpeg((root_ / "work/bus.jpg").string(), image);
  auto r = run(server_.url("/mirror"), "detect --weights yolov5s.pt --source bus.jpg --img 64 --device cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(server_.requests("/mirror/yolov5s.pt"), 1);
  r = run(server_.url("/mirror"), "export --weights yolov5s.pt --img-size 64 --device cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(server_.requests("/mirror/yolov5s.pt"), 1) << "a file already there is used as it is";
  EXPECT_TRUE(fs::is_regular_file(root_ / "work/yolov5s.onnx"));
}

TEST_F(DownloadCommand, OfflineTheErrorSaysWhatFailedAndWhatToDoByHand) {
  std::string mirror;
  {
    LoopbackHttpServer gone;
    mirror = gone.url("/mirror");
  }  // nothing listens there any more
  const auto r = run(mirror, "export --weights yolov5s.pt --img-size 64 --device cpu");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot download " + mirror + "/yolov5s.pt to yolov5s.pt"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("onnect"), std::string::npos) << r.out;  // curl's "Couldn't connect to server"
  EXPECT_NE(r.out.find("https://github.com/ultralytics/yolov5/releases/tag/v7.0 and save it as yolov5s.pt"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(root_ / "work/yolov5s.pt"));
}

}  // namespace
