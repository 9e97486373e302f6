// The classification image sources: numpy's .npy format written and read (the reference's files
// included), --cache parsing, .npy collisions, and what each mode reads on a second load.
#include "yolo/data/classify_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;
using kestrel::testing::error_of;

namespace {

class ClassifyCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / (std::string("kestrel_classify_cache_") + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(ClassifyCacheTest, NpyFilesAreNumpysFormat) {
  cv::Mat img(3, 5, CV_8UC3);
  for (int i = 0; i < 45; ++i) img.data[i] = static_cast<uint8_t>(i * 5);
  const std::string path = (dir_ / "x.npy").string();
  write_npy_image(path, img);
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  ASSERT_EQ(bytes.size(), 128u + 45u);  // the header padded to 64 bytes' multiple
  const std::string head(bytes.begin(), bytes.begin() + 128);
  EXPECT_EQ(head.substr(1, 5), "NUMPY");
  EXPECT_NE(head.find("{'descr': '|u1', 'fortran_order': False, 'shape': (3, 5, 3), }"), std::string::npos);
  EXPECT_EQ(head.back(), '\n');
  EXPECT_EQ(cv::norm(read_npy_image(path), img, cv::NORM_INF), 0);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()), 140);
  const std::string e = error_of([&] { read_npy_image(path); });
  EXPECT_NE(e.find("x.npy' holds 12 bytes of pixels, its shape needs 45"), std::string::npos) << e;
  EXPECT_NE(e.find("delete"), std::string::npos) << e;
}

TEST_F(ClassifyCacheTest, TwoImagesMayNotShareAnNpyAndCacheValuesAreParsed) {
  const std::vector<std::string> twins = {(dir_ / "t.jpg").string(), (dir_ / "t.png").string()};
  const std::string e = error_of([&] { ClassifyImages images(twins, ClassifyCacheMode::Disk); });
  EXPECT_NE(e.find("would share " + (dir_ / "t.npy").string()), std::string::npos) << e;
  ClassifyImages fine(twins, ClassifyCacheMode::Ram);  // only .npy files collide
  EXPECT_EQ(npy_path_of("a/b.c.JPG"), "a/b.c.npy");
  EXPECT_EQ(parse_classify_cache("ram"), ClassifyCacheMode::Ram);
  EXPECT_EQ(parse_classify_cache("true"), ClassifyCacheMode::Ram);
  EXPECT_EQ(parse_classify_cache("disk"), ClassifyCacheMode::Disk);
  EXPECT_EQ(parse_classify_cache(""), ClassifyCacheMode::None);
  EXPECT_NE(error_of([&] { parse_classify_cache("gpu"); }).find("ram or disk"), std::string::npos);
}

TEST_F(ClassifyCacheTest, GreyArraysAreReadAndOtherDtypesRefused) {
  // np.save of a (2, 2) uint8 array: the reference's cache of a grey image read otherwise.
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header + "\x01\x02\x03\x04";
  kestrel::write_file_atomic((dir_ / "g.npy").string(), bytes);
  const cv::Mat grey = read_npy_image((dir_ / "g.npy").string());
  ASSERT_EQ(grey.type(), CV_8UC3);
  EXPECT_EQ(grey.at<cv::Vec3b>(1, 1), cv::Vec3b(4, 4, 4));
  // A float array of the same shape is refused, naming the file.
  std::string f = bytes;
  f.replace(f.find("|u1"), 3, "<f4");
  kestrel::write_file_atomic((dir_ / "f.npy").string(), f);
  const std::string e = error_of([&] { read_npy_image((dir_ / "f.npy").string()); });
  EXPECT_NE(e.find("f.npy' does not hold 8-bit unsigned pixels"), std::string::npos) << e;
}

TEST_F(ClassifyCacheTest, LoadsDecodeKeepOrWriteAsTheModeSays) {
  cv::Mat img(6, 4, CV_8UC3);
  cv::randu(img, 0, 256);
  const std::string png = (dir_ / "a.png").string();
  write_png(png, img);
  for (ClassifyCacheMode mode : {ClassifyCacheMode::None, ClassifyCacheMode::Ram, ClassifyCacheMode::Disk}) {
    ClassifyImages images({png}, mode);
    EXPECT_EQ(cv::norm(images.load(0), img, cv::NORM_INF), 0);
    EXPECT_EQ(fs::exists(dir_ / "a.npy"), mode == ClassifyCacheMode::Disk);
    std::ofstream(png, std::ios::trunc) << "spoilt";
    if (mode == ClassifyCacheMode::None) {  // decoded every time: the spoilt file is named
      const std::string e = error_of([&] { images.load(0); });
      EXPECT_NE(e.find("remove " + png + " from the dataset"), std::string::npos) << e;
    } else {  // kept in memory, or read from a.npy
      EXPECT_EQ(cv::norm(images.load(0), img, cv::NORM_INF), 0);
    }
    write_png(png, img);
  }
}

}  // namespace
