#include "yolo/data/image_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <opencv2/imgproc.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

class ImageIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kestrel_image_io_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

cv::Mat random_image(int h, int w, unsigned seed) {
  cv::Mat m(h, w, CV_8UC3);
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w * 3; ++x) m.ptr<uchar>(y)[x] = static_cast<uchar>(rng() & 255);
  return m;
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

// A JPEG (written by image_codec) with an EXIF APP1 segment holding only the orientation tag,
// inserted right after the start-of-image marker.
void write_jpeg_with_orientation(const std::string& file, const cv::Mat& image, int orientation) {
  write_jpeg(file, image, 100);
  std::vector<uint8_t> jpeg = read_file_bytes(file);
  // "Exif\0\0", little-endian TIFF header, one IFD entry: 0x0112 SHORT x1 = orientation.
  const std::vector<uint8_t> tiff = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 0x2A, 0, 8, 0, 0, 0,
                                     1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
                                     static_cast<uint8_t>(orientation), 0, 0, 0, 0, 0, 0, 0};
  const size_t len = tiff.size() + 2;
  std::vector<uint8_t> app1 = {0xFF, 0xE1, static_cast<uint8_t>(len >> 8),
                               static_cast<uint8_t>(len)};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  jpeg.insert(jpeg.begin() + 2, app1.begin(), app1.end());
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
}

void write_bytes(const std::string& file, const std::vector<uint8_t>& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A JPEG whose frame header (SOF0, as write_jpeg writes) declares side x side pixels.
std::vector<uint8_t> declaring_size(std::vector<uint8_t> jpeg, uint16_t side) {
  size_t p = 2;
  while (p + 9 < jpeg.size() && !(jpeg[p] == 0xFF && jpeg[p + 1] == 0xC0))
    p += 2 + (static_cast<size_t>(jpeg[p + 2]) << 8 | jpeg[p + 3]);
  for (size_t at : {p + 5, p + 7}) jpeg[at] = static_cast<uint8_t>(side >> 8), jpeg[at + 1] = static_cast<uint8_t>(side);
  return jpeg;
}

TEST_F(ImageIoTest, LoadImageRespectsExifOrientation) {
  // 32 wide, 16 high: left half black, right half white. Orientation 6 means "rotate 90 degrees
  // clockwise to display": upright it is 16 wide, 32 high, black on top.
  cv::Mat img(16, 32, CV_8UC3, cv::Scalar::all(0));
  img(cv::Rect(16, 0, 16, 16)).setTo(cv::Scalar::all(255));
  write_jpeg_with_orientation(path("r6.jpg"), img, 6);
  write_jpeg_with_orientation(path("r1.jpg"), img, 1);
  const LoadedImage upright = load_image(path("r1.jpg"), 32, false);
  EXPECT_EQ(upright.w0, 32);
  EXPECT_EQ(upright.h0, 16);
  const LoadedImage rotated = load_image(path("r6.jpg"), 32, false);
  ASSERT_EQ(rotated.w0, 16);
  ASSERT_EQ(rotated.h0, 32);
  ASSERT_EQ(rotated.image.cols, 16);
  EXPECT_LT(cv::mean(rotated.image(cv::Rect(0, 0, 16, 14)))[0], 10.0);
  EXPECT_GT(cv::mean(rotated.image(cv::Rect(0, 18, 16, 14)))[0], 245.0);
}

TEST_F(ImageIoTest, BadFilesThrowNamingTheFile) {
  auto expect_error = [](const std::string& file) {
    try {
      load_image(file, 32, true);
      ADD_FAILURE() << "no error for " << file;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  };
  expect_error(path("missing.jpg"));
  std::ofstream(path("empty.jpg")).close();
  expect_error(path("empty.jpg"));
  std::ofstream(path("junk.jpg")) << "this is not a jpeg at all";
  expect_error(path("junk.jpg"));
  // Refused from its header (PIL's pixel limit), never allocated: 60000^2 BGR would be 10.8 GB.
  write_jpeg(path("small.jpg"), random_image(16, 16, 1));
  write_bytes(path("bomb.jpg"), declaring_size(read_file_bytes(path("small.jpg")), 60000));
  expect_error(path("bomb.jpg"));
}

TEST_F(ImageIoTest, CutJpegStillLoads) {
  // The reference restores a JPEG cut short instead of dropping it; the loader decodes its rows.
  write_jpeg(path("full.jpg"), random_image(40, 60, 7));
  const std::vector<uint8_t> jpeg = read_file_bytes(path("full.jpg"));
  write_bytes(path("cut.jpg"), std::vector<uint8_t>(jpeg.begin(), jpeg.end() - jpeg.size() / 3));
  const LoadedImage li = load_image(path("cut.jpg"), 60, true);
  EXPECT_EQ(li.w0, 60);
  EXPECT_EQ(li.h0, 40);
}

TEST_F(ImageIoTest, ResizeLongSideUsesTheReferenceInterpolation) {
  const cv::Mat img = random_image(50, 100, 2);
  // r = 64 / 100: (int(100 * 0.64), int(50 * 0.64)) = (64, 32).
  cv::Mat area, linear;
  cv::resize(img, area, cv::Size(64, 32), 0, 0, cv::INTER_AREA);
  cv::resize(img, linear, cv::Size(64, 32), 0, 0, cv::INTER_LINEAR);
  ASSERT_FALSE(same_pixels(area, linear));  // the check below can tell them apart
  EXPECT_TRUE(same_pixels(resize_long_side(img, 64, /*augment=*/false), area));
  EXPECT_TRUE(same_pixels(resize_long_side(img, 64, /*augment=*/true), linear));
  // Enlarging is always INTER_LINEAR: 20x10 -> r = 3.2 -> 64x32.
  const cv::Mat small = random_image(10, 20, 3);
  cv::Mat up_linear, up_area;
  cv::resize(small, up_linear, cv::Size(64, 32), 0, 0, cv::INTER_LINEAR);
  cv::resize(small, up_area, cv::Size(64, 32), 0, 0, cv::INTER_AREA);
  ASSERT_FALSE(same_pixels(up_linear, up_area));
  EXPECT_TRUE(same_pixels(resize_long_side(small, 64, false), up_linear));
  // Sizes truncate: 3 x 7 at 10 -> r = 10/7 -> (int(3 * 1.4286), 10) = (4, 10).
  const cv::Mat odd = resize_long_side(random_image(7, 3, 4), 10, true);
  EXPECT_EQ(odd.cols, 4);
  EXPECT_EQ(odd.rows, 10);
  // Already at size: the same pixels, no copy.
  const cv::Mat exact = random_image(64, 40, 5);
  EXPECT_EQ(resize_long_side(exact, 64, false).data, exact.data);
}

TEST_F(ImageIoTest, LoadImageKeepsTheOriginalSize) {
  write_png(path("b.png"), random_image(30, 60, 6));
  const LoadedImage li = load_image(path("b.png"), 40, false);
  EXPECT_EQ(li.h0, 30);
  EXPECT_EQ(li.w0, 60);
  EXPECT_EQ(li.image.cols, 40);
  EXPECT_EQ(li.image.rows, 20);
}

}  // namespace

// A loader thread's buffers (LoadBuffers): the same pixels as a fresh load, the same memory on the
// next load, and no new memory once every buffer has held the largest image.
TEST_F(ImageIoTest, LoadBuffersAreReusedAndGiveTheSamePixels) {
  // At img_size 64: 64x48 stays (the decoded buffer becomes the slot's), 80x40 shrinks, 30x50
  // grows, a PNG stays, and an EXIF-turned JPEG comes out in memory of its own.
  write_jpeg(path("a.jpg"), random_image(48, 64, 1), 90);
  write_jpeg(path("b.jpg"), random_image(40, 80, 2), 90);
  write_jpeg(path("c.jpg"), random_image(50, 30, 3), 90);
  write_png(path("d.png"), random_image(64, 40, 4));
  write_jpeg_with_orientation(path("e.jpg"), random_image(32, 64, 5), 6);
  const std::vector<std::string> files = {path("a.jpg"), path("b.jpg"), path("c.jpg"), path("d.png"),
                                          path("e.jpg")};
  LoadBuffers buffers;
  for (bool augment : {true, false}) {
    for (int round = 0; round < 3; ++round) {
      const int64_t before = buffers.allocations();
      for (int slot = 0; slot < LoadBuffers::kSlots; ++slot)
        for (const std::string& f : files) {
          const LoadedImage fresh = load_image(f, 64, augment);
          const LoadedImage reused = load_image(f, 64, augment, buffers, slot);
          EXPECT_TRUE(same_pixels(fresh.image, reused.image)) << f << " slot " << slot;
          EXPECT_EQ(fresh.h0, reused.h0);
          EXPECT_EQ(fresh.w0, reused.w0);
        }
      // The first round sizes the buffers; after it nothing is allocated again.
      if (round > 0 || !augment) EXPECT_EQ(buffers.allocations(), before) << "round " << round;
    }
  }
  EXPECT_GT(buffers.allocations(), 0);
  // A slot's next load of an image of the same size lands in the same memory, and the other
  // slots' images stay intact meanwhile.
  const LoadedImage first = load_image(path("b.jpg"), 64, true, buffers, 1);
  const cv::Mat kept = first.image.clone();
  const LoadedImage other = load_image(path("c.jpg"), 64, true, buffers, 2);
  const LoadedImage again = load_image(path("b.jpg"), 64, true, buffers, 1);
  EXPECT_EQ(first.image.data, again.image.data);
  EXPECT_NE(other.image.data, again.image.data);
  EXPECT_TRUE(same_pixels(again.image, kept));
  EXPECT_THROW(load_image(path("a.jpg"), 64, true, buffers, LoadBuffers::kSlots), Error);
}

TEST(PixelBuffer, GrowsNeverShrinksAndLeavesHugeImagesTheirOwnMemory) {
  PixelBuffer b;
  cv::Mat small = b.image(10, 10, CV_8UC3);
  EXPECT_EQ(b.allocations(), 1);
  EXPECT_EQ(small.u, nullptr);  // a view: it owns nothing
  cv::Mat big = b.image(20, 20, CV_8UC3);
  EXPECT_EQ(b.allocations(), 2);
  EXPECT_EQ(b.capacity(), 1200u);
  cv::Mat again = b.image(10, 10, CV_8UC3);
  EXPECT_EQ(b.allocations(), 2);
  EXPECT_EQ(again.data, big.data);
  const int side = 4000;  // 48 MB: above kMaxKeptBytes
  ASSERT_GT(size_t{side} * side * 3, PixelBuffer::kMaxKeptBytes);
  cv::Mat huge = b.image(side, side, CV_8UC3);
  EXPECT_NE(huge.u, nullptr);
  EXPECT_EQ(b.capacity(), 1200u);
  EXPECT_EQ(b.allocations(), 2);
}
