// Release weights by name, fetched from a loopback mirror (tests/support/http_server) serving the
// reference-made tests/data/yolov5n_coco80.pt: downloaded to the path given (its folder made) and
// read as a checkpoint; an existing file is used as it is; a download that is no checkpoint is
// removed and refused; a failure names the address, the reason and the release page; -cls and
// -seg models are refused by name; other names pass through untouched; what a killed download
// left is removed (its temporary) or downloaded and checked again (an unchecked file).
#include "yolo/model/release_weights.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/http_server.h"
#include "tests/support/testing.h"
#include "yolo/model/weights_file.h"

namespace {

namespace fs = std::filesystem;
using kestrel::testing::error_of;
using kestrel::testing::LoopbackHttpServer;
using kestrel::yolo::Console;
using kestrel::yolo::DownloadSettings;
using kestrel::yolo::fetch_missing_weights;

class ReleaseWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_release_weights_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    settings_.mirror = server_.url("/mirror");
    settings_.stall_seconds = 5;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  LoopbackHttpServer server_;
  DownloadSettings settings_;
  Console quiet_{false};
};

TEST_F(ReleaseWeights, KnowsTheReleasesDetectionModels) {
  for (const char* name : {"yolov5n.pt", "yolov5s.pt", "yolov5m.pt", "yolov5l.pt", "yolov5x.pt", "yolov5n6.pt",
                           "yolov5s6.pt", "yolov5m6.pt", "yolov5l6.pt", "yolov5x6.pt"})
    EXPECT_TRUE(kestrel::yolo::is_release_weights(name)) << name;
  for (const char* name : {"yolov5s-seg.pt", "yolov5s-cls.pt", "yolov5t.pt", "yolov5s.safetensors", "best.pt", "yolov5s7.pt"})
    EXPECT_FALSE(kestrel::yolo::is_release_weights(name)) << name;
}

TEST_F(ReleaseWeights, AMissingReleaseFileIsDownloadedWhereItWasNamed) {
  server_.serve("/mirror/yolov5n.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
  const std::string path = (dir_ / "weights/yolov5n.pt").string();
  EXPECT_EQ(fetch_missing_weights(path, settings_, quiet_), path);
  EXPECT_EQ(server_.requests("/mirror/yolov5n.pt"), 1);
  EXPECT_EQ(kestrel::yolo::read_file_bytes(path), kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
  EXPECT_FALSE(fs::exists(path + ".unchecked")) << "checked, then named";
  // Present now: used as it is, nothing fetched again.
  EXPECT_EQ(fetch_missing_weights(path, settings_, quiet_), path);
  EXPECT_EQ(server_.requests("/mirror/yolov5n.pt"), 1);
}

TEST_F(ReleaseWeights, ADownloadThatIsNoCheckpointIsRemoved) {
  server_.serve("/mirror/yolov5s.pt", "<html>a captive portal's login page</html>");
  const std::string path = (dir_ / "yolov5s.pt").string();
  const std::string e = error_of([&] { fetch_missing_weights(path, settings_, quiet_); });
  EXPECT_NE(e.find("but it is not a checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find(server_.url("/mirror/yolov5s.pt")), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".unchecked"));
}

// A download killed mid-transfer leaves its temporary (<file>.tmp.<pid>.<n>): the next download of
// that file removes it, as it does not a live writer's; a file under the weights' own name has
// always passed the check (it is renamed there only after it), so a kill during the check leaves
// only <file>.unchecked, which the next run downloads and checks again (issue 42).
TEST_F(ReleaseWeights, WhatAKilledDownloadLeftIsRemovedOrCheckedAgain) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that no longer exists
  const std::string path = (dir_ / "yolov5n.pt").string();
  const std::string dead = path + ".unchecked.tmp." + std::to_string(child) + ".0";
  const std::string live = path + ".unchecked.tmp." + std::to_string(::getppid()) + ".0";
  std::ofstream(dead) << "half a download";
  std::ofstream(live) << "another writer's";
  std::ofstream(path + ".unchecked") << "a download whose check never finished";
  server_.serve("/mirror/yolov5n.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
  EXPECT_EQ(fetch_missing_weights(path, settings_, quiet_), path);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_FALSE(fs::exists(path + ".unchecked"));
  EXPECT_EQ(kestrel::yolo::read_file_bytes(path), kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
}

TEST_F(ReleaseWeights, AFailedDownloadNamesTheAddressTheReasonAndTheReleasePage) {
  server_.fail("/mirror/yolov5m6.pt", 404);
  const std::string path = (dir_ / "yolov5m6.pt").string();
  const std::string e = error_of([&] { fetch_missing_weights(path, settings_, quiet_); });
  EXPECT_NE(e.find(server_.url("/mirror/yolov5m6.pt")), std::string::npos) << e;
  EXPECT_NE(e.find("HTTP 404"), std::string::npos) << e;
  EXPECT_NE(e.find("https://github.com/ultralytics/yolov5/releases/tag/v7.0"), std::string::npos) << e;
  EXPECT_NE(e.find("save it as " + path), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(ReleaseWeights, WithoutAMirrorTheReleaseAssetIsTheAddress) {
  settings_.mirror = "";  // the address the reference's attempt_download builds (nothing is fetched here)
  EXPECT_EQ(kestrel::yolo::mirrored_url(std::string(kestrel::yolo::kReleaseAssets) + "yolov5s.pt", settings_),
            "https://github.com/ultralytics/yolov5/releases/download/v7.0/yolov5s.pt");
}

TEST_F(ReleaseWeights, ClassificationAndSegmentationModelsAreRefusedByName) {
  const std::string e = error_of([&] { fetch_missing_weights("yolov5s-seg.pt", settings_, quiet_); });
  EXPECT_NE(e.find("segmentation model"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { fetch_missing_weights("yolov5s-cls.pt", settings_, quiet_); }).find("classification"),
            std::string::npos);
  EXPECT_EQ(server_.requests("/mirror/yolov5s-seg.pt"), 0);
}

TEST_F(ReleaseWeights, OtherNamesPassThroughUntouched) {
  EXPECT_EQ(fetch_missing_weights("", settings_, quiet_), "");
  EXPECT_EQ(fetch_missing_weights("runs/train/exp/weights/best.pt", settings_, quiet_), "runs/train/exp/weights/best.pt");
  EXPECT_EQ(fetch_missing_weights("tests/data/yolov5n_synthetic.pt", settings_, quiet_), "tests/data/yolov5n_synthetic.pt");
}

TEST_F(ReleaseWeights, AUrlIsFetchedToItsFileNameHere) {
  // The reference's attempt_download puts a URL's file in the current directory: run from dir_.
  server_.serve("/files/custom.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_synthetic.pt"));
  settings_.mirror = "";
  const fs::path here = fs::current_path();
  fs::current_path(dir_);
  std::string local, e;
  e = error_of([&] { local = fetch_missing_weights(server_.url("/files/custom.pt?token=1"), settings_, quiet_); });
  fs::current_path(here);
  EXPECT_EQ(e, "");
  EXPECT_EQ(local, "custom.pt");
  EXPECT_TRUE(fs::is_regular_file(dir_ / "custom.pt"));
}

}  // namespace
