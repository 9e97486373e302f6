// Label parsing and the image/label checks: every bad input is refused or flagged with its file
// (and row) named and counted as the reference counts it.
#include "yolo/data/label_scan.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("kestrel_scan_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path / "images");
    fs::create_directories(path / "labels");
  }
  ~TempDir() { fs::remove_all(path); }
  std::string image(const std::string& name) const { return (path / "images" / name).string(); }
  std::string label(const std::string& name) const { return (path / "labels" / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

cv::Mat picture(int h, int w) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) m.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>(x * 3), static_cast<uint8_t>(y * 5), 90);
  return m;
}

// EXIF APP1 segment with one Orientation entry (big-endian TIFF), inserted after the SOI.
std::vector<uint8_t> with_orientation(std::vector<uint8_t> jpeg, uint8_t orientation) {
  std::vector<uint8_t> app1 = {0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0,
                               8,    0,    1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, orientation, 0, 0,
                               0,    0,    0, 0};
  jpeg.insert(jpeg.begin() + 2, app1.begin(), app1.end());
  return jpeg;
}

// The JPEG with its frame header (SOF0, as write_jpeg writes) declaring a size of side x side.
std::vector<uint8_t> declaring_size(std::vector<uint8_t> jpeg, uint16_t side) {
  size_t p = 2;
  while (p + 9 < jpeg.size() && !(jpeg[p] == 0xFF && jpeg[p + 1] == 0xC0))
    p += 2 + (static_cast<size_t>(jpeg[p + 2]) << 8 | jpeg[p + 3]);
  for (size_t at : {p + 5, p + 7}) jpeg[at] = static_cast<uint8_t>(side >> 8), jpeg[at + 1] = static_cast<uint8_t>(side);
  return jpeg;
}

// The JPEG cut right after its first start-of-scan header: no pixel data at all.
std::vector<uint8_t> cut_after_scan_header(const std::vector<uint8_t>& jpeg) {
  size_t p = 2;
  while (p + 4 < jpeg.size() && !(jpeg[p] == 0xFF && jpeg[p + 1] == 0xDA))
    p += 2 + (static_cast<size_t>(jpeg[p + 2]) << 8 | jpeg[p + 3]);
  return {jpeg.begin(), jpeg.begin() + static_cast<long>(p + 2 + (jpeg[p + 2] << 8 | jpeg[p + 3]))};
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(ImageToLabelPath, ReplacesTheLastImagesFolderAndTheExtension) {
  EXPECT_EQ(image_to_label_path("/d/images/train/a.jpg"), "/d/labels/train/a.txt");
  EXPECT_EQ(image_to_label_path("/images/x/images/a.PNG"), "/images/x/labels/a.txt");
  EXPECT_EQ(image_to_label_path("/d.v1/images/a.b.jpeg"), "/d.v1/labels/a.b.txt");
  EXPECT_EQ(image_to_label_path("/d/pics/a.jpg"), "/d/pics/a.txt");
  EXPECT_EQ(image_to_label_path("/d/myimages/a.jpg"), "/d/myimages/a.txt");
}

TEST(ParseLabels, ReadsRowsSkipsBlankLinesAndDropsDuplicates) {
  const ParsedLabels p = parse_labels("0 0.5 0.5 0.2 0.4\r\n\n  2 +0.1 .9 1 5e-2  \n0 0.5 0.5 0.2 0.4\n", 3);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.boxes.size(), 2u);
  EXPECT_EQ(p.boxes[0], (LabelBox{0, 0.5f, 0.5f, 0.2f, 0.4f}));
  EXPECT_EQ(p.boxes[1], (LabelBox{2, 0.1f, 0.9f, 1.0f, 0.05f}));
  EXPECT_EQ(p.duplicates, 1);
  EXPECT_TRUE(parse_labels(" \n\n", 3).boxes.empty());
  EXPECT_TRUE(parse_labels(" \n\n", 3).error.empty());
}

TEST(ParseLabels, RefusesBadRowsNamingTheRow) {
  const struct {
    const char* text;
    const char* expect;
  } cases[] = {
      {"0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2\n", "row 2: expected 5 values"},
      {"0 0.5 0.5 0.2 0.2 0.1\n", "row 1: expected 5 values"},
      {"3 0.5 0.5 0.2 0.2\n", "row 1: class 3 outside [0, 3)"},
      {"1.5 0.5 0.5 0.2 0.2\n", "not an integer"},
      {"-1 0.5 0.5 0.2 0.2\n", "not an integer in [0, 2^31)"},
      {"1e30 0.5 0.5 0.2 0.2\n", "not an integer in [0, 2^31)"},
      {"0 0.5 0.5 0.2 0.2\n0 1.2 0.5 0.2 0.2\n", "row 2: coordinates must be normalised"},
      {"0 0.5 -0.1 0.2 0.2\n", "row 1: coordinates"},
      {"0 0.5 0.5 nan 0.2\n", "row 1: value 'nan' is not finite"},
      {"0 0.5 0.5 inf 0.2\n", "not finite"},
      {"0 0.5 0.5 1e39 0.2\n", "not finite"},  // overflows float32 as the reference's array does
      {"0 0.5 0.5 0 0.2\n", "row 1: box width and height must be > 0"},
      {"0 0.5 0.5 0.2 abc\n", "row 1: 'abc' is not a number"},
      {"0 0.5 0.5 0.2 +-1\n", "is not a number"},
      {"0 0.1 0.1 0.2 0.1 0.3 0.3 0.4\n", "a polygon needs x y pairs"},
  };
  for (const auto& c : cases) {
    const ParsedLabels p = parse_labels(c.text, 3);
    EXPECT_TRUE(mentions(p.error, c.expect)) << "'" << c.text << "' gave '" << p.error << "'";
    EXPECT_TRUE(p.boxes.empty()) << c.text;
  }
}

// What a row holds is echoed escaped: a NUL would cut the printed warning short, and control
// bytes would reach the terminal.
TEST(ParseLabels, BadBytesAreEscapedInTheMessage) {
  using namespace std::string_literals;
  const ParsedLabels p = parse_labels("0 0.5 0.5 0.2 0.2\n0 0.5 0.5\0\x1b[2J\xff 0.2 0.2\n"s, 3);
  EXPECT_EQ(p.error, "row 2: '0.5\\x00\\x1b[2J\\xff' is not a number");
  EXPECT_EQ(p.error.find('\0'), std::string::npos);
}

TEST(ParseLabels, NoClassLimitAcceptsAnyClassAndPolygonsBecomeBoxes) {
  EXPECT_TRUE(parse_labels("99 0.5 0.5 0.2 0.2\n", 0).error.empty());
  EXPECT_FALSE(parse_labels("3e9 0.5 0.5 0.2 0.2\n", 0).error.empty());  // no int overflow
  // Any row longer than 6 values makes every row a polygon (the reference's segment format).
  const ParsedLabels p = parse_labels("1 0.1 0.2 0.5 0.2 0.3 0.6\n0 0.2 0.2 0.4 0.2 0.4 0.4 0.2 0.4\n", 2);
  ASSERT_TRUE(p.error.empty()) << p.error;
  ASSERT_EQ(p.boxes.size(), 2u);
  EXPECT_EQ(p.boxes[0].cls, 1);
  EXPECT_NEAR(p.boxes[0].x, 0.3f, 1e-6);
  EXPECT_NEAR(p.boxes[0].y, 0.4f, 1e-6);
  EXPECT_NEAR(p.boxes[0].w, 0.4f, 1e-6);
  EXPECT_NEAR(p.boxes[0].h, 0.4f, 1e-6);
  EXPECT_NEAR(p.boxes[1].x, 0.3f, 1e-6);
  EXPECT_NEAR(p.boxes[1].w, 0.2f, 1e-6);
}

TEST(VerifyImageLabel, GoodPairsBackgroundsAndDuplicates) {
  TempDir d("pairs");
  write_jpeg(d.image("a.jpg"), picture(30, 40));
  write_text(d.label("a.txt"), "1 0.5 0.5 0.5 0.5\n1 0.5 0.5 0.5 0.5\n");
  PairCheck a = verify_image_label(d.image("a.jpg"), d.label("a.txt"), 2);
  ASSERT_TRUE(a.usable) << a.warning;
  EXPECT_EQ(a.record.width, 40);
  EXPECT_EQ(a.record.height, 30);
  EXPECT_EQ(a.record.boxes.size(), 1u);
  EXPECT_EQ(a.counts, (ScanCounts{1, 0, 0, 0, 1}));
  EXPECT_TRUE(mentions(a.warning, d.image("a.jpg")) && mentions(a.warning, "1 duplicate labels removed"))
      << a.warning;

  write_png(d.image("b.png"), picture(12, 10));
  PairCheck b = verify_image_label(d.image("b.png"), d.label("b.txt"), 2);  // no label file
  EXPECT_TRUE(b.usable);
  EXPECT_TRUE(b.record.boxes.empty());
  EXPECT_TRUE(b.warning.empty());
  EXPECT_EQ(b.counts, (ScanCounts{0, 1, 0, 0, 1}));

  write_text(d.label("b.txt"), "\n  \n");
  PairCheck e = verify_image_label(d.image("b.png"), d.label("b.txt"), 2);  // empty label file
  EXPECT_TRUE(e.usable);
  EXPECT_EQ(e.counts, (ScanCounts{1, 0, 1, 0, 1}));
}

TEST(VerifyImageLabel, CorruptImagesAreSkippedWithTheFileNamed) {
  TempDir d("corrupt");
  write_text(d.label("x.txt"), "0 0.5 0.5 0.5 0.5\n");
  std::vector<uint8_t> jpeg;
  write_jpeg(d.image("full.jpg"), picture(40, 40));
  {
    std::ifstream in(d.image("full.jpg"), std::ios::binary);
    jpeg.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const struct {
    std::string name;
    std::vector<uint8_t> bytes;
    const char* expect;
  } cases[] = {
      {"zero.jpg", {}, "empty file (0 bytes)"},
      {"bomb.jpg", declaring_size(jpeg, 60000), "60000x60000 = 3600000000 pixels"},
      {"noise.jpg", {0xFF, 0xD8, 0xFF, 0x00, 0x13, 0x77, 0xFF, 0xD9}, "corrupt JPEG"},
      {"text.png", {'h', 'e', 'l', 'l', 'o'}, "not a JPEG or PNG"},
      {"no_scan.jpg", cut_after_scan_header(jpeg), "no image data"},
  };
  for (const auto& c : cases) {
    write_bytes(d.image(c.name), c.bytes);
    const PairCheck p = verify_image_label(d.image(c.name), d.label("x.txt"), 1);
    EXPECT_FALSE(p.usable) << c.name;
    EXPECT_EQ(p.counts, (ScanCounts{0, 0, 0, 1, 1})) << c.name;
    EXPECT_TRUE(mentions(p.warning, d.image(c.name)) && mentions(p.warning, c.expect))
        << c.name << ": " << p.warning;
  }
  write_jpeg(d.image("thin.jpg"), picture(9, 50));
  const PairCheck thin = verify_image_label(d.image("thin.jpg"), d.label("x.txt"), 1);
  EXPECT_FALSE(thin.usable);
  EXPECT_TRUE(mentions(thin.warning, "50x9 is below 10 pixels")) << thin.warning;
  const PairCheck gone = verify_image_label(d.image("missing.jpg"), d.label("x.txt"), 1);
  EXPECT_FALSE(gone.usable);
  EXPECT_EQ(gone.counts.corrupt, 1);
}

// As the reference restores a JPEG that does not end in FF D9: decoded as far as it goes, used,
// and reported. Bytes after the end marker are no damage at all.
TEST(VerifyImageLabel, DamagedJpegsAreRestoredWithAWarning) {
  TempDir d("restored");
  write_text(d.label("cut.txt"), "0 0.5 0.5 0.5 0.5\n0 0.5 0.5 0.5 0.5\n");
  write_jpeg(d.image("full.jpg"), picture(40, 48));
  std::vector<uint8_t> jpeg;
  {
    std::ifstream in(d.image("full.jpg"), std::ios::binary);
    jpeg.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  write_bytes(d.image("cut.jpg"), std::vector<uint8_t>(jpeg.begin(), jpeg.end() - 100));
  const PairCheck cut = verify_image_label(d.image("cut.jpg"), d.label("cut.txt"), 1);
  ASSERT_TRUE(cut.usable) << cut.warning;
  EXPECT_EQ(cut.counts, (ScanCounts{1, 0, 0, 0, 1}));
  EXPECT_EQ(cut.record.width, 48);
  EXPECT_EQ(cut.record.height, 40);
  EXPECT_EQ(cut.record.boxes.size(), 1u);
  EXPECT_TRUE(mentions(cut.warning, d.image("cut.jpg")) && mentions(cut.warning, "corrupt JPEG restored") &&
              mentions(cut.warning, "1 duplicate labels removed"))
      << cut.warning;

  jpeg.insert(jpeg.end(), {0x00, 0x42, 0xFF, 0xD8});
  write_bytes(d.image("padded.jpg"), jpeg);
  const PairCheck padded = verify_image_label(d.image("padded.jpg"), d.label("none.txt"), 1);
  EXPECT_TRUE(padded.usable);
  EXPECT_TRUE(padded.warning.empty()) << padded.warning;
  EXPECT_EQ(padded.record.width, 48);

  // Bits changed inside the entropy-coded data, marker chain whole: the scan judges a JPEG by its
  // header and markers, as the reference by its header and last two bytes, and does not decode
  // it, so it passes without a word (the loader's decoder later turns such damage grey).
  std::vector<uint8_t> flipped(jpeg.begin(), jpeg.end() - 4);
  for (size_t i = flipped.size() - 60; i < flipped.size() - 40; ++i)
    if (flipped[i] != 0xFF && flipped[i - 1] != 0xFF) flipped[i] = 0x13;
  ASSERT_TRUE(jpeg_structure_intact(flipped));
  write_bytes(d.image("flipped.jpg"), flipped);
  const PairCheck bits = verify_image_label(d.image("flipped.jpg"), d.label("none.txt"), 1);
  EXPECT_TRUE(bits.usable);
  EXPECT_TRUE(bits.warning.empty()) << bits.warning;
  EXPECT_EQ(bits.record.width, 48);
  EXPECT_EQ(bits.record.height, 40);
}

TEST(VerifyImageLabel, BadLabelsRefuseTheImageNamingFileAndRow) {
  TempDir d("badlabels");
  write_jpeg(d.image("a.jpg"), picture(20, 20));
  write_text(d.label("a.txt"), "0 0.5 0.5 0.5 0.5\n0 0.5 1.5 0.5 0.5\n");
  const PairCheck p = verify_image_label(d.image("a.jpg"), d.label("a.txt"), 1);
  EXPECT_FALSE(p.usable);
  // As the reference: the label file was found, and the image is counted corrupt.
  EXPECT_EQ(p.counts, (ScanCounts{1, 0, 0, 1, 1}));
  EXPECT_TRUE(mentions(p.warning, d.label("a.txt")) && mentions(p.warning, "row 2")) << p.warning;
}

TEST(VerifyImageLabel, SizeIsReportedAfterExifOrientation) {
  TempDir d("exif");
  write_jpeg(d.image("plain.jpg"), picture(30, 60));
  std::vector<uint8_t> jpeg;
  {
    std::ifstream in(d.image("plain.jpg"), std::ios::binary);
    jpeg.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  write_bytes(d.image("rot6.jpg"), with_orientation(jpeg, 6));  // stored sideways: 90 degrees
  write_bytes(d.image("rot3.jpg"), with_orientation(jpeg, 3));  // upside down: same size
  const PairCheck r6 = verify_image_label(d.image("rot6.jpg"), d.label("none.txt"), 1);
  const PairCheck r3 = verify_image_label(d.image("rot3.jpg"), d.label("none.txt"), 1);
  ASSERT_TRUE(r6.usable && r3.usable) << r6.warning << r3.warning;
  EXPECT_EQ(r6.record.width, 30);
  EXPECT_EQ(r6.record.height, 60);
  EXPECT_EQ(r3.record.width, 60);
  EXPECT_EQ(r3.record.height, 30);
}

TEST(ScanImages, CountsWarningsAndOrderDoNotDependOnThreads) {
  TempDir d("scan");
  std::vector<std::string> images;
  for (int i = 0; i < 12; ++i) {
    const std::string name = "im" + std::to_string(10 + i);
    write_jpeg(d.image(name + ".jpg"), picture(20 + i, 24));
    if (i % 4 == 1) continue;                                  // 3 missing labels
    if (i % 4 == 2) write_text(d.label(name + ".txt"), "");    // 3 empty
    if (i % 4 == 0) write_text(d.label(name + ".txt"), "0 0.5 0.5 0.1 0.1\n");
    if (i % 4 == 3) write_text(d.label(name + ".txt"), i == 3 ? "7 0.5 0.5 0.1 0.1\n" : "1 0.2 0.2 0.1 0.1\n");
    images.push_back(d.image(name + ".jpg"));
  }
  for (int i = 0; i < 12; i += 4) images.push_back(d.image("im" + std::to_string(11 + i) + ".jpg"));
  write_bytes(d.image("zz.jpg"), {});
  images.push_back(d.image("zz.jpg"));

  ThreadPool one(1), three(3);
  const ScanResult a = scan_images(images, 2, one);
  const ScanResult b = scan_images(images, 2, three);
  // 13 images: 3 missing, 3 empty, 5 labelled of which one has class 7 >= nc, one zero-byte file.
  EXPECT_EQ(a.counts, (ScanCounts{9, 3, 3, 2, 13}));
  EXPECT_EQ(a.counts.backgrounds(), 6);
  ASSERT_EQ(a.records.size(), 11u);
  ASSERT_EQ(a.warnings.size(), 2u);
  EXPECT_TRUE(mentions(a.warnings[0], "im13.jpg") && mentions(a.warnings[0], "class 7")) << a.warnings[0];
  EXPECT_TRUE(mentions(a.warnings[1], "zz.jpg")) << a.warnings[1];
  EXPECT_EQ(b.counts, a.counts);
  EXPECT_EQ(b.warnings, a.warnings);
  ASSERT_EQ(b.records.size(), a.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    EXPECT_EQ(b.records[i].image_path, a.records[i].image_path);
    EXPECT_EQ(b.records[i].boxes, a.records[i].boxes);
    EXPECT_EQ(b.records[i].height, a.records[i].height);
  }
  EXPECT_EQ(scan_summary("/d/labels/train", a.counts),
            "Scanning '/d/labels/train'... 9 images, 6 backgrounds, 2 corrupt");
}
