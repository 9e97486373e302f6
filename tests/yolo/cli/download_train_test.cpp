// The first command of every YOLOv5 user, from an empty folder with nothing cached (HOME inside
// the scratch folder): `kestrel train --data coco128.yaml --weights yolov5n.pt --img 320
// --epochs 1` downloads both, from a loopback mirror standing in for GitHub and ultralytics.com
// (tests/support/http_server), unpacks the dataset where the reference does (../datasets/coco128
// from the folder it runs in) and transfers all 349 tensors. The mirror serves
// tests/data/yolov5n_coco80.pt (a yolov5n for COCO's 80 classes, made by the reference) and a
// small coco128.zip built here in coco128's layout (real JPEGs with labels, deflated). Two images
// in one batch keep the training short; the rest is the command as issue 24 gives it.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <filesystem>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"
#include "tests/support/http_server.h"
#include "tests/support/zip_writer.h"
#include "tests/yolo/cli/empty_folder_run.h"
#include "yolo/data/image_codec.h"
#include "yolo/model/weights_file.h"

namespace {

namespace fs = std::filesystem;
using kestrel::testing::ZipInput;

// coco128.zip's layout: coco128/{images,labels}/train2017, with a LICENSE beside them.
std::string small_coco128_zip(const fs::path& scratch) {
  std::vector<ZipInput> entries = {{"coco128/", ""}, {"coco128/LICENSE", "test data, no licence needed\n"}};
  for (int i = 0; i < 2; ++i) {
    cv::Mat image(240 + 16 * i, 320, CV_8UC3, cv::Scalar(30 * i, 90, 160));
    cv::rectangle(image, cv::Rect(40 + 10 * i, 60, 120, 90), cv::Scalar(20, 200, 40), cv::FILLED);
    cv::circle(image, cv::Point(240, 150), 40, cv::Scalar(220, 30, 30), cv::FILLED);
    const fs::path jpeg = scratch / "image.jpg";
    kestrel::yolo::data::write_jpeg(jpeg.string(), image);
    const std::string name = "00000000000" + std::to_string(i);
    entries.push_back({"coco128/images/train2017/" + name + ".jpg", kestrel::yolo::read_file_bytes(jpeg.string()),
                       0, 0, false, true});
    entries.push_back({"coco128/labels/train2017/" + name + ".txt",
                       std::to_string(i * 19) + " 0.34 0.44 0.375 0.36\n" + std::to_string(79 - i) + " 0.75 0.6 0.25 0.33\n",
                       0, 0, false, true});
    fs::remove(jpeg);
  }
  return kestrel::testing::make_zip(entries);
}

class DownloadTrain : public kestrel::testing::EmptyFolderRun {
 protected:
  DownloadTrain() : EmptyFolderRun("download_train") {}
};

TEST_F(DownloadTrain, TrainFromAnEmptyFolderDownloadsTheWeightsAndTheDataset) {
  server_.serve("/mirror/yolov5n.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
  server_.serve("/mirror/coco128.zip", small_coco128_zip(root_));
  const auto r = run(server_.url("/mirror"),
                     "train --data coco128.yaml --weights yolov5n.pt --img 320 --epochs 1 --batch-size 2 "
                     "--workers 1 --device cpu --noplots --no-tensorboard");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(server_.requests("/mirror/yolov5n.pt"), 1);
  EXPECT_EQ(server_.requests("/mirror/coco128.zip"), 1);
  EXPECT_NE(r.out.find("Downloading " + server_.url("/mirror/yolov5n.pt") + " to yolov5n.pt..."), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Dataset download success"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Transferred 349/349 items from yolov5n.pt"), std::string::npos) << r.out;
  // The bar's end, drawn once (piped, the bar prints a line per tenth, not per update).
  const std::string end = "100%|██████████| 3.73M/3.73M";
  ASSERT_NE(r.out.find(end), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(end, r.out.find(end) + 1), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(root_ / "work/yolov5n.pt"));
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ / "datasets/coco128/images/train2017"), fs::directory_iterator()), 2);
  EXPECT_FALSE(fs::exists(root_ / "datasets/coco128.zip"));
  EXPECT_TRUE(fs::is_regular_file(root_ / "work/runs/train/exp/weights/last.safetensors"));
}

// Two nodes (two launchers on this host, two ranks each), each with its own disk: node 1 runs in
// a mount namespace where the scratch folder is another folder at the same path, as another
// machine's disk would be. Each node's local rank 0 downloads what its disk lacks, once, before
// its other rank reads (two ranks of a node fetching at once would download twice and race to
// unpack). Needs root (mount namespaces), as CI runs; skipped otherwise.
TEST_F(DownloadTrain, EachNodeDownloadsOnceForItsRanks) {
  if (::geteuid() != 0 || kestrel::testing::run_command("unshare -m true").code != 0)
    GTEST_SKIP() << "needs root and unshare (util-linux) for a mount namespace standing in for node 1's disk";
  server_.serve("/mirror/yolov5n.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"));
  server_.serve("/mirror/coco128.zip", small_coco128_zip(root_));
  const fs::path disk1 = root_.string() + "_node1";
  fs::remove_all(disk1);
  fs::create_directories(disk1 / "work");
  fs::create_directories(disk1 / "home");
  struct Remove {
    fs::path path;
    ~Remove() { fs::remove_all(path); }
  } remove_disk1{disk1};
  const std::string node = "OMP_NUM_THREADS=1 " + kestrel::testing::kestrel_binary().string() +
                           " train --data coco128.yaml --weights yolov5n.pt --img 320 --epochs 1 --batch-size 4 "
                           "--workers 1 --device cpu --noplots --no-tensorboard --nnodes 2 --nproc-per-node 2 "
                           "--master-addr 127.0.0.1 --master-port " +
                           std::to_string(kestrel::testing::free_port()) + " --dist-timeout 120 --node-rank ";
  const std::string node1 = "unshare -m sh -c \"mount --bind '" + disk1.string() + "' '" + root_.string() + "' && cd '" +
                            (root_ / "work").string() + "' && " + node + "1 >node1.log 2>&1; echo \\$? >node1.rc\"";
  const auto r = run_script(server_.url("/mirror"), "(" + node1 + ") & " + node + "0; rc=$?; wait; cat '" +
                                                        (disk1 / "work/node1.log").string() + "'; exit $((rc + $(cat '" +
                                                        (disk1 / "work/node1.rc").string() + "')))");
  const fs::path disks[] = {root_, disk1};
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(server_.requests("/mirror/yolov5n.pt"), 2) << r.out;
  EXPECT_EQ(server_.requests("/mirror/coco128.zip"), 2) << r.out;
  for (const fs::path& disk : disks) {
    EXPECT_TRUE(fs::is_regular_file(disk / "work/yolov5n.pt")) << disk;
    EXPECT_EQ(std::distance(fs::directory_iterator(disk / "datasets/coco128/images/train2017"), fs::directory_iterator()), 2)
        << disk;
  }
  EXPECT_TRUE(fs::is_regular_file(root_ / "work/runs/train/exp/weights/last.safetensors")) << r.out;
}

// Ctrl-C while train fetches its weights (issue 42): the download stops at once (the mirror here
// sends 64 KB, then nothing), the run exits with 130 saying what it stopped, and no run directory
// or partial file is left.
TEST_F(DownloadTrain, CtrlCDuringTheWeightsDownloadStopsAtOnceAndLeavesNothing) {
  server_.serve("/mirror/coco128.zip", small_coco128_zip(root_));
  server_.stall("/mirror/yolov5n.pt", kestrel::yolo::read_file_bytes("tests/data/yolov5n_coco80.pt"), 65536);
  const auto r = run_script(server_.url("/mirror"),
                            "KESTREL_DOWNLOAD_TIMEOUT=60 " + kestrel::testing::kestrel_binary().string() +
                                " train --data coco128.yaml --weights yolov5n.pt --img 320 --epochs 1 --device cpu "
                                "> log 2>&1 & pid=$!; "
                                "for i in $(seq 300); do grep -q 'yolov5n.pt to yolov5n.pt' log && break; sleep 0.1; done; "
                                "sleep 0.5; start=$(date +%s%N); kill -INT $pid; wait $pid; rc=$?; "
                                "echo \"rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))\"; cat log; ls -a; ls runs/train 2>&1");
  EXPECT_NE(r.out.find("rc=130 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("was interrupted (SIGINT); nothing was kept"), std::string::npos) << r.out;
  const size_t ms = r.out.find(" ms=");
  ASSERT_NE(ms, std::string::npos) << r.out;
  EXPECT_LT(std::stoi(r.out.substr(ms + 4)), 3000) << r.out;
  EXPECT_NE(r.out.find("ls: cannot access 'runs/train'"), std::string::npos) << "a run directory was left:\n" << r.out;
  EXPECT_EQ(r.out.find("yolov5n.pt.unchecked"), r.out.find("yolov5n.pt.unchecked...")) << r.out;
}

}  // namespace
