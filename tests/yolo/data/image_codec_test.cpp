// JPEG and PNG in and out: round trips, EXIF orientation, and refusal of broken files.
#include "yolo/data/image_codec.h"

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kestrel_codec_" + name)).string();
}

// A 40x24 image with a distinct colour per quadrant (easy to follow through rotations).
cv::Mat quadrants() {
  cv::Mat m(24, 40, CV_8UC3);
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 40; ++x)
      m.at<cv::Vec3b>(y, x) = cv::Vec3b(x < 20 ? 255 : 0, y < 12 ? 255 : 0, 128);
  return m;
}

// Inserts an EXIF APP1 segment with the given orientation right after the JPEG's SOI marker.
std::vector<uint8_t> with_orientation(std::vector<uint8_t> jpeg, uint16_t orientation) {
  std::vector<uint8_t> tiff = {'I', 'I', 42, 0, 8, 0, 0, 0,  // little-endian, IFD0 at 8
                               1, 0,                         // one entry
                               0x12, 0x01, 3, 0, 1, 0, 0, 0,  // tag 0x0112, SHORT, count 1
                               static_cast<uint8_t>(orientation), 0, 0, 0,
                               0, 0, 0, 0};  // no next IFD
  std::vector<uint8_t> app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const size_t len = app1.size() - 2;
  app1[2] = static_cast<uint8_t>(len >> 8);
  app1[3] = static_cast<uint8_t>(len & 0xFF);
  jpeg.insert(jpeg.begin() + 2, app1.begin(), app1.end());
  return jpeg;
}

double mean_abs_diff(const cv::Mat& a, const cv::Mat& b) {
  return cv::norm(a, b, cv::NORM_L1) / static_cast<double>(a.total() * a.channels());
}

}  // namespace

TEST(ImageCodec, PngRoundTripIsExact) {
  const std::string path = temp_file("rt.png");
  cv::Mat img = quadrants();
  write_png(path, img);
  cv::Mat back = read_image(path);
  EXPECT_EQ(cv::norm(img, back, cv::NORM_INF), 0.0);
  ImageInfo info = probe_image(read_file_bytes(path), path);
  EXPECT_EQ(info.format, ImageFormat::Png);
  EXPECT_EQ(info.width, 40);
  EXPECT_EQ(info.height, 24);
  std::filesystem::remove(path);
}

TEST(ImageCodec, JpegRoundTripIsClose) {
  const std::string path = temp_file("rt.jpg");
  cv::Mat img = quadrants();
  write_jpeg(path, img, 95);
  cv::Mat back = read_image(path);
  ASSERT_EQ(back.size(), img.size());
  EXPECT_LT(mean_abs_diff(img, back), 4.0);
  ImageInfo info = probe_image(read_file_bytes(path), path);
  EXPECT_EQ(info.format, ImageFormat::Jpeg);
  EXPECT_FALSE(info.truncated);
  std::filesystem::remove(path);
}

TEST(ImageCodec, ExifOrientationIsApplied) {
  const std::string path = temp_file("exif.jpg");
  cv::Mat img = quadrants();
  write_jpeg(path, img, 98);
  const std::vector<uint8_t> plain = read_file_bytes(path);
  for (uint16_t o = 1; o <= 8; ++o) {
    std::vector<uint8_t> bytes = with_orientation(plain, o);
    EXPECT_EQ(jpeg_exif_orientation(bytes), o);
    ImageInfo info = probe_image(bytes, "x.jpg");
    cv::Mat decoded = decode_image(bytes, "x.jpg");
    const bool swapped = o >= 5;
    EXPECT_EQ(info.width, swapped ? 24 : 40) << o;
    EXPECT_EQ(decoded.cols, info.width) << o;
    EXPECT_EQ(decoded.rows, info.height) << o;
    EXPECT_LT(mean_abs_diff(decoded, apply_exif_orientation(img, o)), 4.0) << o;
  }
  // Orientation 6 is a quarter turn clockwise: the top-left quadrant (blue+green) goes top-right.
  cv::Mat r = apply_exif_orientation(img, 6);
  EXPECT_EQ(r.at<cv::Vec3b>(0, r.cols - 1), img.at<cv::Vec3b>(0, 0));
  std::filesystem::remove(path);
}

TEST(ImageCodec, BrokenFilesAreRefusedWithTheirPath) {
  const std::string path = temp_file("broken.jpg");
  write_jpeg(path, quadrants());
  std::vector<uint8_t> bytes = read_file_bytes(path);
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() - 10));
  EXPECT_TRUE(probe_image(cut, path).truncated);
  std::vector<uint8_t> header_only(bytes.begin(), bytes.begin() + 20);
  EXPECT_THROW(decode_image(header_only, path), Error);
  EXPECT_THROW(probe_image({}, path), Error);
  try {
    decode_image({'G', 'I', 'F', '8', '9', 'a'}, "/data/a.gif");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/data/a.gif"), std::string::npos);
  }
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0};
  EXPECT_THROW(decode_image(png, "bad.png"), Error);
  EXPECT_THROW(read_image("/no/such/image.jpg"), Error);
  std::filesystem::remove(path);
}
