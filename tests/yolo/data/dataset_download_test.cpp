// A dataset yaml's own download, from a loopback server (tests/support/http_server): a missing
// dataset whose `download` is a .zip address is fetched (directly or through the mirror),
// unpacked into the folder above `path` and checked, and the archive removed; a present one is
// not fetched; a `download` script is never run; an archive without the dataset and a failed
// download are refused, naming the address and what to do by hand.
#include "yolo/data/dataset_download.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "tests/support/http_server.h"
#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/image_codec.h"
#include "yolo/model/weights_file.h"

namespace {

namespace fs = std::filesystem;
using kestrel::testing::error_of;
using kestrel::testing::LoopbackHttpServer;
using kestrel::testing::make_zip;
using kestrel::testing::ZipInput;
using kestrel::yolo::Console;
using kestrel::yolo::DownloadSettings;
using kestrel::yolo::fetch_missing_dataset;

class DatasetDownload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_dataset_download_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path jpeg = dir_ / "a.jpg";
    kestrel::yolo::data::write_jpeg(jpeg.string(), cv::Mat(48, 64, CV_8UC3, cv::Scalar(40, 120, 200)));
    jpeg_ = kestrel::yolo::read_file_bytes(jpeg.string());
    fs::remove(jpeg);
    settings_.stall_seconds = 5;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A dataset yaml whose `path` is <dir_>/datasets/tiny and whose `download` is `download`.
  std::string yaml(const std::string& download) {
    const std::string path = (dir_ / "tiny.yaml").string();
    kestrel::write_file_atomic(path, "path: " + (dir_ / "datasets/tiny").string() +
                                         "\ntrain: images/train\nval: images/train\nnames: [circle, square]\n"
                                         "download: " + download + "\n");
    return path;
  }
  std::string tiny_zip(const std::string& top = "tiny") {
    return make_zip({{top + "/", ""},
                     {top + "/images/train/a.jpg", jpeg_, 0, 0, false, true},
                     {top + "/labels/train/a.txt", "0 0.5 0.5 0.25 0.25\n1 0.2 0.3 0.1 0.1\n", 0, 0, false, true}});
  }

  fs::path dir_;
  std::string jpeg_;
  LoopbackHttpServer server_;
  DownloadSettings settings_;
  Console quiet_{false};
};

TEST_F(DatasetDownload, AMissingDatasetIsFetchedUnpackedAndChecked) {
  server_.serve("/assets/tiny.zip", tiny_zip());
  const std::string path = yaml(server_.url("/assets/tiny.zip"));
  fetch_missing_dataset(path, settings_, quiet_);
  EXPECT_EQ(server_.requests("/assets/tiny.zip"), 1);
  EXPECT_EQ(kestrel::yolo::read_file_bytes((dir_ / "datasets/tiny/images/train/a.jpg").string()), jpeg_);
  EXPECT_FALSE(fs::exists(dir_ / "datasets/tiny.zip")) << "the archive is removed once unpacked";
  const auto cfg = kestrel::yolo::data::load_dataset_config(path);
  EXPECT_EQ(kestrel::yolo::data::list_images(cfg.val, "val").size(), 1u);
  // Present now: nothing is fetched again.
  fetch_missing_dataset(path, settings_, quiet_);
  EXPECT_EQ(server_.requests("/assets/tiny.zip"), 1);
}

TEST_F(DatasetDownload, TheMirrorServesTheArchiveByName) {
  server_.serve("/mirror/tiny.zip", tiny_zip());
  settings_.mirror = server_.url("/mirror");
  fetch_missing_dataset(yaml("https://ultralytics.com/assets/tiny.zip"), settings_, quiet_);
  EXPECT_EQ(server_.requests("/mirror/tiny.zip"), 1);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "datasets/tiny/labels/train/a.txt"));
}

TEST_F(DatasetDownload, AScriptIsNeverRunAndWhatToFetchIsListed) {
  const std::string path = yaml("|\n  images: " + server_.url("/VOCtrainval_06-Nov-2007.zip") +
                                "\n  import os; os.system('touch " + (dir_ / "ran").string() + "')");
  fetch_missing_dataset(path, settings_, quiet_);
  EXPECT_EQ(server_.requests("/VOCtrainval_06-Nov-2007.zip"), 0);
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
  const std::string e = error_of([&] { kestrel::yolo::data::load_dataset_config(path); });
  EXPECT_NE(e.find("which Kestrel never runs"), std::string::npos) << e;
  EXPECT_NE(e.find(server_.url("/VOCtrainval_06-Nov-2007.zip")), std::string::npos) << e;
}

TEST_F(DatasetDownload, AnArchiveWithoutTheDatasetIsRefused) {
  server_.serve("/other.zip", tiny_zip("other"));
  const std::string e = error_of([&] { fetch_missing_dataset(yaml(server_.url("/other.zip")), settings_, quiet_); });
  EXPECT_NE(e.find("was unpacked into " + (dir_ / "datasets").string() + " (making other)"), std::string::npos) << e;
  EXPECT_NE(e.find("dataset not found"), std::string::npos) << e;
}

TEST_F(DatasetDownload, AFailedDownloadNamesTheAddressAndWhatToDoByHand) {
  server_.fail("/tiny.zip", 500);
  const std::string url = server_.url("/tiny.zip");
  const std::string e = error_of([&] { fetch_missing_dataset(yaml(url), settings_, quiet_); });
  EXPECT_NE(e.find("cannot download " + url), std::string::npos) << e;
  EXPECT_NE(e.find("HTTP 500"), std::string::npos) << e;
  EXPECT_NE(e.find("unpack it into " + (dir_ / "datasets").string()), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "datasets")) << "the folder made for it is removed again";
}

// A server that answers with an HTML page (an error or sign-in page) under the .zip's name: named
// as a web page, not as a damaged archive (issue 42).
TEST_F(DatasetDownload, AWebPageServedAsTheArchiveIsNamed) {
  server_.serve("/tiny.zip", "<!DOCTYPE html>\n<html><body>Sign in to continue</body></html>\n");
  const std::string e = error_of([&] { fetch_missing_dataset(yaml(server_.url("/tiny.zip")), settings_, quiet_); });
  EXPECT_NE(e.find("sent a web page, not a zip archive"), std::string::npos) << e;
  EXPECT_NE(e.find("by hand"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "datasets/tiny"));
}

TEST_F(DatasetDownload, ADamagedArchiveLeavesNoDataset) {
  std::string zip = tiny_zip();
  zip[zip.size() / 3] ^= 0x55;  // inside the image's deflate stream
  server_.serve("/tiny.zip", zip);
  const std::string e = error_of([&] { fetch_missing_dataset(yaml(server_.url("/tiny.zip")), settings_, quiet_); });
  EXPECT_FALSE(e.empty());
  EXPECT_NE(e.find("by hand"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "datasets/tiny"));
  EXPECT_FALSE(fs::exists(dir_ / "datasets/tiny.zip"));
}

}  // namespace
