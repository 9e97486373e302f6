// train --cache disk, as the reference's: every training image's decoded pixels saved once as an
// .npy beside it (np.save of the BGR array, numpy's format) and read back instead of decoding; a
// run from the .npy files trains exactly as a run decoding the images (the same results.csv), and
// the files already there are kept. opt.yaml says cache: disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>

#include "tests/support/cli.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/npy_image.h"

namespace fs = std::filesystem;
using kestrel::testing::run_kestrel;

TEST(CacheDisk, NpyBesideTheImagesAndTheSameTraining) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_cache_disk_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "labels");
  cv::RNG rng(3);
  for (int i = 0; i < 4; ++i) {
    cv::Mat image(60 + 8 * i, 80, CV_8UC3);
    rng.fill(image, cv::RNG::UNIFORM, 0, 255);
    kestrel::yolo::data::write_jpeg((dir / "images" / ("im" + std::to_string(i) + ".jpg")).string(), image);
    std::ofstream((dir / "labels" / ("im" + std::to_string(i) + ".txt")).string()) << "0 0.5 0.5 0.4 0.3\n";
  }
  std::ofstream(dir / "four.yaml") << "path: " << dir.string() << "\ntrain: images\nval: images\nnames: ['box']\n";
  const std::string common = "train --cfg models/yolov5n.yaml --data " + (dir / "four.yaml").string() +
                             " --epochs 2 --img 64 --batch-size 2 --device cpu --workers 1 --noplots --noval "
                             "--no-tensorboard --project " + (dir / "runs").string();
  auto r = run_kestrel(common + " --name plain");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_kestrel(common + " --name disk --cache disk");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("train: Caching images ("), std::string::npos) << r.out;
  for (int i = 0; i < 4; ++i) {
    const std::string stem = (dir / "images" / ("im" + std::to_string(i))).string();
    ASSERT_TRUE(fs::exists(stem + ".npy")) << stem;
    const cv::Mat npy = kestrel::yolo::data::read_npy_image(stem + ".npy");
    const cv::Mat decoded = kestrel::yolo::data::read_image(stem + ".jpg");
    ASSERT_EQ(npy.size(), decoded.size());
    EXPECT_EQ(cv::norm(npy, decoded, cv::NORM_INF), 0.0) << "the .npy holds the decoded pixels";
  }
  const auto npy_time = fs::last_write_time(dir / "images" / "im0.npy");
  r = run_kestrel(common + " --name disk2 --cache disk");  // the .npy files are read, not written again
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(fs::last_write_time(dir / "images" / "im0.npy"), npy_time);
  const auto plain = kestrel::testing::read_results_csv(dir / "runs" / "plain" / "results.csv");
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(kestrel::testing::read_results_csv(dir / "runs" / "disk" / "results.csv"), plain);
  EXPECT_EQ(kestrel::testing::read_results_csv(dir / "runs" / "disk2" / "results.csv"), plain);
  std::ifstream opt(dir / "runs" / "disk" / "opt.yaml");
  const std::string text((std::istreambuf_iterator<char>(opt)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\ncache: disk\n"), std::string::npos) << text;
  fs::remove_all(dir);
}

// The val loader takes --cache too, as train.py's (cache=None if noval else opt.cache): a run that
// validates saves the val images' .npy beside them and says so; with --noval it leaves them alone.
TEST(CacheDisk, ValidationImagesTooUnlessNoval) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_cache_disk_val_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  cv::RNG rng(5);
  for (const char* split : {"train", "val"}) {
    fs::create_directories(dir / "images" / split);
    fs::create_directories(dir / "labels" / split);
    for (int i = 0; i < 2; ++i) {
      cv::Mat image(64, 64, CV_8UC3);
      rng.fill(image, cv::RNG::UNIFORM, 0, 255);
      const std::string stem = std::string(split) + std::to_string(i);
      kestrel::yolo::data::write_jpeg((dir / "images" / split / (stem + ".jpg")).string(), image);
      std::ofstream((dir / "labels" / split / (stem + ".txt")).string()) << "0 0.5 0.5 0.4 0.3\n";
    }
  }
  std::ofstream(dir / "two.yaml") << "path: " << dir.string() << "\ntrain: images/train\nval: images/val\nnames: ['box']\n";
  const std::string common = "train --cfg models/yolov5n.yaml --data " + (dir / "two.yaml").string() +
                             " --epochs 1 --img 64 --batch-size 2 --device cpu --workers 1 --noplots --no-tensorboard "
                             "--cache disk --project " + (dir / "runs").string();
  auto r = run_kestrel(common + " --noval --name noval");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "images/train/train0.npy"));
  EXPECT_FALSE(fs::exists(dir / "images/val/val0.npy")) << "--noval: the val loader caches nothing";
  r = run_kestrel(common + " --name val");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "images/val/val0.npy"));
  EXPECT_TRUE(fs::exists(dir / "images/val/val1.npy"));
  EXPECT_NE(r.out.find("val: Caching images ("), std::string::npos) << r.out;
  fs::remove_all(dir);
}
