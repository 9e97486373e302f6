// JPEG and PNG in and out: round trips, EXIF orientation, damaged JPEGs decoded as far as they
// go (one without any scan data refused), CMYK JPEGs converted as OpenCV converts them, and
// refusal of broken files and of headers declaring more pixels than PIL allows.
#include "yolo/data/image_codec.h"

#include <sys/resource.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <cstdlib>
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

// The JPEG with its frame header (SOF0, as tjCompress2 writes) declaring width x height.
std::vector<uint8_t> jpeg_declaring(std::vector<uint8_t> jpeg, uint16_t width, uint16_t height) {
  size_t p = 2;
  while (p + 9 < jpeg.size() && !(jpeg[p] == 0xFF && jpeg[p + 1] == 0xC0))
    p += 2 + (static_cast<size_t>(jpeg[p + 2]) << 8 | jpeg[p + 3]);
  EXPECT_LT(p + 9, jpeg.size()) << "no SOF0 marker";
  jpeg[p + 5] = static_cast<uint8_t>(height >> 8), jpeg[p + 6] = static_cast<uint8_t>(height);
  jpeg[p + 7] = static_cast<uint8_t>(width >> 8), jpeg[p + 8] = static_cast<uint8_t>(width);
  return jpeg;
}

// The PNG with its IHDR chunk declaring width x height (and a CRC that matches, so libpng reads it).
std::vector<uint8_t> png_declaring(std::vector<uint8_t> png, uint32_t width, uint32_t height) {
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
  };
  put32(16, width);  // signature (8), chunk length (4), "IHDR" (4), then width and height
  put32(20, height);
  put32(29, static_cast<uint32_t>(crc32(0, png.data() + 12, 17)));  // over "IHDR" + 13 data bytes
  return png;
}

std::vector<uint8_t> encoded(const cv::Mat& img, bool png) {
  const std::string path = temp_file(png ? "enc.png" : "enc.jpg");
  png ? write_png(path, img) : write_jpeg(path, img, 95);
  std::vector<uint8_t> bytes = read_file_bytes(path);
  std::filesystem::remove(path);
  return bytes;
}

// 256 high, 64 wide, smooth gradients: a file cut off half-way still shows its top rows exactly.
cv::Mat gradient() {
  cv::Mat m(256, 64, CV_8UC3);
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x) m.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 4, y, 128);
  return m;
}

// The JPEG cut right after its first start-of-scan header: markers, tables, no pixel data.
std::vector<uint8_t> cut_after_scan_header(const std::vector<uint8_t>& jpeg) {
  size_t p = 2;
  while (p + 4 < jpeg.size() && !(jpeg[p] == 0xFF && jpeg[p + 1] == 0xDA))
    p += 2 + (static_cast<size_t>(jpeg[p + 2]) << 8 | jpeg[p + 3]);
  EXPECT_LT(p + 4, jpeg.size()) << "no SOS marker";
  return {jpeg.begin(), jpeg.begin() + static_cast<long>(p + 2 + (jpeg[p + 2] << 8 | jpeg[p + 3]))};
}

// TurboJPEG's encoding of `pixels` (laid out as `format`) with its own options.
std::vector<uint8_t> turbo_jpeg(const cv::Mat& pixels, int format, int subsampling, int quality, int flags) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, pixels.data, pixels.cols, 0, pixels.rows, format, &out, &size, subsampling,
                        quality, flags), 0) << tjGetErrorStr2(tj);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

// A 4-channel JPEG (Adobe YCCK, as TurboJPEG writes CMYK) of the given inks, stored inverted
// as Adobe's files store them (255 = no ink).
std::vector<uint8_t> cmyk_jpeg(const cv::Mat& cmyk) {
  return turbo_jpeg(cmyk, TJPF_CMYK, TJSAMP_444, 100, TJFLAG_ACCURATEDCT);
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
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
  EXPECT_EQ(info.width, 40);
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

TEST(ImageCodec, BytesAfterTheEndMarkerAreIgnored) {
  const std::vector<uint8_t> jpeg = encoded(gradient(), false);
  std::vector<uint8_t> padded = jpeg;
  for (uint8_t b : {0x00, 0x13, 0xFF, 0xD8, 0x42, 0x0A}) padded.push_back(b);
  std::string warning = "not cleared";
  const cv::Mat back = decode_image(padded, "padded.jpg", &warning);
  EXPECT_EQ(cv::norm(back, decode_image(jpeg, "plain.jpg"), cv::NORM_INF), 0.0);
  EXPECT_TRUE(warning.empty()) << warning;
}

TEST(ImageCodec, CutJpegsDecodeWhatTheyHoldWithAWarning) {
  const cv::Mat img = gradient();
  const std::vector<uint8_t> jpeg = encoded(img, false);
  const cv::Mat whole = decode_image(jpeg, "whole.jpg");
  // Only the end-of-image marker missing: every pixel is there.
  std::string warning;
  const cv::Mat no_marker =
      decode_image(std::vector<uint8_t>(jpeg.begin(), jpeg.end() - 2), "no_marker.jpg", &warning);
  EXPECT_EQ(cv::norm(no_marker, whole, cv::NORM_INF), 0.0);
  EXPECT_TRUE(mentions(warning, "Premature end of JPEG file")) << warning;
  // Cut at 60%: the top rows decode as in the whole file (rows near the cut differ: chroma is
  // interpolated with the missing rows), the rest is filled in.
  const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() * 6 / 10));
  const cv::Mat part = decode_image(cut, "cut.jpg", &warning);
  ASSERT_EQ(part.size(), img.size());
  EXPECT_EQ(cv::norm(part.rowRange(0, 32), whole.rowRange(0, 32), cv::NORM_INF), 0.0);
  EXPECT_GT(cv::norm(part.rowRange(224, 256), whole.rowRange(224, 256), cv::NORM_INF), 0.0);
  EXPECT_FALSE(warning.empty());
}

TEST(ImageCodec, HeadersDeclaringTooManyPixelsAreRefusedBeforeDecoding) {
  // 60000x60000 would be 10.8 GB of BGR pixels: refused from the header, naming the file.
  const std::vector<uint8_t> jpeg = jpeg_declaring(encoded(gradient(), false), 60000, 60000);
  const std::vector<uint8_t> png = png_declaring(encoded(gradient(), true), 60000, 60000);
  for (const auto& [bytes, path] : {std::pair{jpeg, "/data/bomb.jpg"}, std::pair{png, "/data/bomb.png"}}) {
    try {
      probe_image(bytes, path);
      ADD_FAILURE() << path << " was not refused";
    } catch (const Error& e) {
      EXPECT_TRUE(mentions(e.what(), path) && mentions(e.what(), "60000x60000") &&
                  mentions(e.what(), "decompression-bomb")) << e.what();
    }
    EXPECT_THROW(decode_image(bytes, path), Error);
  }
  // PIL's limit itself: 9459^2 = 89,472,681 pixels pass the header check, 9460^2 do not.
  EXPECT_EQ(probe_image(jpeg_declaring(jpeg, 9459, 9459), "ok.jpg").width, 9459);
  EXPECT_EQ(probe_image(png_declaring(png, 9459, 9459), "ok.png").height, 9459);
  EXPECT_THROW(probe_image(jpeg_declaring(jpeg, 9460, 9460), "big.jpg"), Error);
  EXPECT_THROW(probe_image(png_declaring(png, 9460, 9460), "big.png"), Error);
}

// Pixels that do not fit in memory are an Error naming the file, not a std::bad_alloc or
// cv::Exception that says nothing of it. The child process caps its address space to make the
// 8000x8000 (192 MB) allocation fail.
TEST(ImageCodecDeathTest, AllocationFailureNamesTheFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<uint8_t> jpeg = jpeg_declaring(encoded(gradient(), false), 8000, 8000);
  auto decode_with_little_memory = [&] {
    std::ifstream status("/proc/self/status");
    long vm_kb = 0;
    for (std::string key; status >> key;)
      if (key == "VmSize:") status >> vm_kb;
    const rlim_t cap = static_cast<rlim_t>(vm_kb) * 1024 + (64u << 20);
    const rlimit limit{cap, cap};
    setrlimit(RLIMIT_AS, &limit);
    try {
      decode_image(jpeg, "/data/huge.jpg");
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      std::_Exit(mentions(e.what(), "/data/huge.jpg") ? 0 : 1);  // no exit handlers: OpenBLAS's hang here
    }
    std::_Exit(2);
  };
  EXPECT_EXIT(decode_with_little_memory(), ::testing::ExitedWithCode(0), "not enough memory");
}

// PIL refuses such a file as truncated, so the reference counts it corrupt; libjpeg-turbo alone
// would hand back an all-grey picture with a warning.
TEST(ImageCodec, JpegsEndingAtTheirScanHeaderAreRefused) {
  const std::vector<uint8_t> jpeg = encoded(gradient(), false);
  std::vector<uint8_t> no_data = cut_after_scan_header(jpeg);
  std::vector<uint8_t> only_end_marker = no_data;
  only_end_marker.insert(only_end_marker.end(), {0xFF, 0xD9});
  for (const auto& bytes : {no_data, only_end_marker}) {
    try {
      decode_image(bytes, "/data/empty_scan.jpg");
      ADD_FAILURE() << "a JPEG without scan data was decoded";
    } catch (const Error& e) {
      EXPECT_TRUE(mentions(e.what(), "/data/empty_scan.jpg") && mentions(e.what(), "no image data"))
          << e.what();
    }
  }
  // One byte of scan data is damage the decoder recovers from, as any cut file.
  std::vector<uint8_t> one_byte(jpeg.begin(), jpeg.begin() + static_cast<long>(no_data.size() + 1));
  std::string warning;
  EXPECT_EQ(decode_image(one_byte, "one_byte.jpg", &warning).size(), gradient().size());
  EXPECT_FALSE(warning.empty());
}

// OpenCV reads CMYK JPEGs (libjpeg's inverted Adobe inks) as k - ((255 - ink) * k >> 8).
TEST(ImageCodec, CmykJpegsDecodeAsOpenCvConvertsThem) {
  // Stored inks (C, M, Y, K), 255 = none: white, pure cyan, a half-dark red, black.
  const cv::Vec4b patches[] = {{255, 255, 255, 255}, {0, 255, 255, 255}, {255, 0, 0, 128},
                               {255, 255, 255, 0}};
  cv::Mat cmyk(16, 64, CV_8UC4);
  for (int x = 0; x < 64; ++x) cmyk.col(x).setTo(patches[x / 16]);
  const std::vector<uint8_t> jpeg = cmyk_jpeg(cmyk);
  std::string warning;
  const cv::Mat bgr = decode_image(jpeg, "cmyk.jpg", &warning);
  ASSERT_EQ(bgr.size(), cmyk.size());
  ASSERT_EQ(bgr.type(), CV_8UC3);
  EXPECT_TRUE(warning.empty()) << warning;
  // Exactly OpenCV's integer formula on what libjpeg decodes.
  cv::Mat inks(cmyk.size(), CV_8UC4);
  tjhandle tj = tjInitDecompress();
  ASSERT_EQ(tjDecompress2(tj, jpeg.data(), jpeg.size(), inks.data, 64, 0, 16, TJPF_CMYK,
                          TJFLAG_ACCURATEDCT), 0);
  tjDestroy(tj);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 64; ++x) {
      const cv::Vec4b p = inks.at<cv::Vec4b>(y, x);
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(bgr.at<cv::Vec3b>(y, x)[2 - c], p[3] - ((255 - p[c]) * p[3] >> 8)) << x << "," << y;
    }
  // And what that means: the patches' colours, in BGR, to within JPEG rounding.
  const cv::Vec3b expected[] = {{255, 255, 255}, {255, 255, 1}, {1, 1, 128}, {0, 0, 0}};
  for (int i = 0; i < 4; ++i)
    EXPECT_LE(cv::norm(bgr.at<cv::Vec3b>(8, 16 * i + 8), expected[i], cv::NORM_INF), 3.0) << i;
}

namespace {

// A progressive JPEG: several scans, each with its own entropy-coded data between markers.
std::vector<uint8_t> progressive_jpeg(const cv::Mat& bgr) {
  return turbo_jpeg(bgr, TJPF_BGR, TJSAMP_420, 90, TJFLAG_PROGRESSIVE);
}

size_t count_scans(const std::vector<uint8_t>& jpeg) {
  size_t scans = 0;
  for (size_t i = 0; i + 1 < jpeg.size(); ++i) scans += jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA;
  return scans;
}

}  // namespace

// The label scan judges a JPEG by its header and marker chain instead of decoding it: whole files
// (baseline, progressive, with EXIF, with bytes after the end marker) pass; every prefix of a
// file, a chain broken by a wrong segment length or a stray byte, and a file without scan data
// do not, so each of those goes to the full decoder's verdict.
TEST(ImageCodec, JpegStructureIntactFollowsTheWholeMarkerChain) {
  const std::vector<uint8_t> baseline = encoded(gradient(), false);
  const std::vector<uint8_t> progressive = progressive_jpeg(gradient());
  ASSERT_GT(count_scans(progressive), 2u);
  std::vector<uint8_t> padded = baseline;
  padded.insert(padded.end(), {0x00, 0xFF, 0xD8, 0x42});
  for (const auto& whole : {baseline, progressive, with_orientation(baseline, 6), padded})
    EXPECT_TRUE(jpeg_structure_intact(whole));

  for (const auto& whole : {baseline, progressive}) {
    for (size_t cut = 0; cut < whole.size(); ++cut)
      ASSERT_FALSE(jpeg_structure_intact({whole.begin(), whole.begin() + static_cast<long>(cut)}))
          << "a prefix of " << cut << " of " << whole.size() << " bytes passed";
  }
  std::vector<uint8_t> no_data = cut_after_scan_header(baseline);
  no_data.insert(no_data.end(), {0xFF, 0xD9});
  EXPECT_FALSE(jpeg_structure_intact(no_data));

  std::vector<uint8_t> long_segment = baseline;  // APP0 (JFIF) claims to run past the end
  ASSERT_EQ(long_segment[3], 0xE0);
  long_segment[4] = 0xFF, long_segment[5] = 0xF0;
  EXPECT_FALSE(jpeg_structure_intact(long_segment));
  std::vector<uint8_t> stray = baseline;  // a byte where the next marker should start
  stray.insert(stray.begin() + 2, 0x42);
  EXPECT_FALSE(jpeg_structure_intact(stray));
  EXPECT_FALSE(jpeg_structure_intact(encoded(gradient(), true)));  // a PNG
  EXPECT_FALSE(jpeg_structure_intact({}));

  // Whatever passes decodes with no warning (nothing the decoder would have to restore).
  for (const auto& whole : {baseline, progressive, padded}) {
    std::string warning;
    EXPECT_EQ(decode_image(whole, "whole.jpg", &warning).size(), gradient().size());
    EXPECT_TRUE(warning.empty()) << warning;
  }
}
