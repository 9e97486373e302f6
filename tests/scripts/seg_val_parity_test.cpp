// `kestrel segment val` against the reference's segment/val.py (YOLOv5 v7.0) on the first 16
// images of coco128-seg at 160, batch 32, conf 0.001, IoU 0.6, for the same weights:
// tests/data/yolov5n_seg_coco128_16.pt, a yolov5n-seg the reference itself trained on those 16
// images (the command is in tests/data/README.md), so that its boxes and masks are confident and
// validation is a fixed function of the pipeline.
//
// - RecordedReferenceNumbers: kestrel's "all" row (box and mask P, R, mAP50, mAP50-95) equals the
//   reference's, recorded in tests/scripts/seg_val_parity_reference.txt; standalone (label masks per
//   instance at full size, predicted masks on the prototype grid) and with --save-json (masks made at
//   the input size, as the reference's process_mask_upsample).
// - LiveReference: the same against the reference run now (tests/scripts/seg_val_reference.py), and
//   with --save-json every detection's RLE mask in Kestrel's predictions.json against the
//   reference's (expect_same_masks). Those masks are the sigmoid of the mask logits upsampled, then
//   thresholded: they agree only because Kestrel's NMS scales the coefficients by the objectness as
//   the reference's does (kernels/nms.h, nms_coefficient); without it the masks of a detection
//   overlap at IoU 0.5 to 0.9.
// Each is skipped, saying what is missing, without what it needs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "io/json.h"
#include "io/rle.h"
#include "tests/support/cli.h"
#include "tests/support/coco128.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kCoco128Seg;
using kestrel::testing::run_kestrel;

namespace {

const char* kWeights = "tests/data/yolov5n_seg_coco128_16.pt";
constexpr int kImages = 16;

// The "all" row of a segmentation table: images, instances, then box P, R, mAP50, mAP50-95 and the
// mask's.
struct AllRow {
  int images = 0, instances = 0;
  std::array<double, 8> metrics{};
};

// The last "all" row in `text`, or with `marker` the first one after it; false when there is none.
bool parse_all_row(const std::string& text, AllRow& row, const std::string& marker = "") {
  static const std::regex re(R"(^\s*all\s+(\d+)\s+(\d+)((?:\s+\S+){8})\s*$)");
  std::istringstream lines(marker.empty() ? text : text.substr(std::min(text.size(), text.find(marker))));
  bool found = false;
  for (std::string line; std::getline(lines, line);) {
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    row.images = std::stoi(m[1]);
    row.instances = std::stoi(m[2]);
    std::istringstream values(m[3].str());
    for (double& v : row.metrics) values >> v;
    found = true;
    if (!marker.empty()) break;
  }
  return found;
}

// Both tools print '%11.3g': equal to one unit in the third significant digit.
void expect_same_row(const AllRow& kestrel, const AllRow& reference) {
  EXPECT_EQ(kestrel.images, kImages);
  EXPECT_EQ(kestrel.images, reference.images);
  EXPECT_EQ(kestrel.instances, reference.instances);
  const char* names[] = {"box P", "box R", "box mAP50", "box mAP50-95", "mask P", "mask R", "mask mAP50", "mask mAP50-95"};
  for (int i = 0; i < 8; ++i) {
    const double a = kestrel.metrics[i], b = reference.metrics[i];
    const double unit = b > 0 ? std::pow(10.0, std::floor(std::log10(b)) - 2) : 1e-3;
    EXPECT_LE(std::abs(a - b), unit * 1.001) << names[i] << ": kestrel " << a << ", reference " << b;
  }
  EXPECT_GT(reference.metrics[6], 0.1) << "the fixture's masks should be learnt well enough to be matched";
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_seg_val_parity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

AllRow kestrel_val(const std::string& data, const fs::path& dir, bool json, const std::string& weights = kWeights) {
  const CliResult r = run_kestrel("segment val --data " + data + " --weights " + weights +
                                  " --img-size 160 --batch-size 32 --conf-thres 0.001 --iou-thres 0.6 --device cpu "
                                  "--workers 2 --exist-ok --project " + dir.string() + " --name kestrel" +
                                  (json ? " --save-json" : ""));
  EXPECT_EQ(r.code, 0) << r.out;
  AllRow row;
  EXPECT_TRUE(parse_all_row(r.out, row)) << "no 'all' row in kestrel's output:\n" << r.out;
  return row;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void expect_recorded(bool json) {
  if (!fs::exists(kCoco128Seg / "coco128-seg.yaml")) GTEST_SKIP() << "coco128-seg not found at " << kCoco128Seg;
  const std::string text = read_text("tests/scripts/seg_val_parity_reference.txt");
  AllRow reference;
  ASSERT_TRUE(parse_all_row(text, reference, json ? "# --save-json" : "# standalone"))
      << "no 'all' row in tests/scripts/seg_val_parity_reference.txt";
  const fs::path dir = scratch(json ? "recorded_json" : "recorded");
  expect_same_row(kestrel_val(kestrel::testing::scratch_coco128_seg(dir / "data", kImages), dir, json), reference);
  fs::remove_all(dir);
}

const kestrel::json::Value& member(const kestrel::json::Value& v, const char* key) {
  const kestrel::json::Value* m = v.find(key);
  if (m == nullptr) throw std::runtime_error(std::string("predictions.json: a detection without ") + key);
  return *m;
}

// The detections of a predictions.json by (image, category, score), each with its box and mask.
struct Detection {
  std::array<double, 4> bbox{};
  kestrel::rle::Rle mask;
};
using Detections = std::multimap<std::string, Detection>;
Detections read_detections(const fs::path& path) {
  Detections out;
  const kestrel::json::Value v = kestrel::json::parse(read_text(path));
  for (const kestrel::json::Value& d : v.as_array()) {
    const kestrel::json::Value& seg = member(d, "segmentation");
    const std::string key = kestrel::json::dump(member(d, "image_id")) + " " +
                            kestrel::json::dump(member(d, "category_id")) + " " + kestrel::json::dump(member(d, "score"));
    Detection det;
    for (int i = 0; i < 4; ++i) det.bbox[i] = member(d, "bbox").as_array()[i].as_real();
    det.mask.height = member(seg, "size").as_array()[0].as_integer();
    det.mask.width = member(seg, "size").as_array()[1].as_integer();
    det.mask.counts = kestrel::rle::from_string(member(seg, "counts").as_string());
    out.emplace(key, det);
  }
  return out;
}

// Every reference detection found in Kestrel's file (same image, category and score, the box
// within 0.01 px: the two forwards round differently) has a mask of the same size that overlaps
// the reference's at IoU 0.98 or more; at most a tenth are not found (a score rounded to the
// other side of its fifth digit, or another choice among equal candidates at max_det).
void expect_same_masks(const fs::path& kestrel_json, const fs::path& reference_json) {
  const Detections k = read_detections(kestrel_json), r = read_detections(reference_json);
  ASSERT_GT(r.size(), 100u);
  size_t matched = 0;
  double worst = 1;
  for (const auto& [key, det] : r) {
    const Detection* same = nullptr;
    for (auto [it, end] = k.equal_range(key); it != end; ++it) {
      double d = 0;
      for (int i = 0; i < 4; ++i) d = std::max(d, std::abs(it->second.bbox[i] - det.bbox[i]));
      if (d <= 0.01) same = &it->second;
    }
    if (same == nullptr) continue;
    ++matched;
    ASSERT_EQ(same->mask.height, det.mask.height) << key;
    ASSERT_EQ(same->mask.width, det.mask.width) << key;
    const std::vector<uint8_t> a = kestrel::rle::decode(same->mask), b = kestrel::rle::decode(det.mask);
    int64_t both = 0, either = 0;
    for (size_t i = 0; i < a.size(); ++i) both += a[i] && b[i], either += a[i] || b[i];
    if (either > 0) worst = std::min(worst, static_cast<double>(both) / static_cast<double>(either));
  }
  EXPECT_GE(matched, r.size() * 9 / 10) << "reference detections found in Kestrel's predictions.json";
  EXPECT_GE(worst, 0.98) << "the least overlap of two masks of one detection";
}

void expect_live(bool json) {
  kestrel::testing::Reference ref;
  const std::string missing = kestrel::testing::find_reference(
      ref, json ? std::vector<std::string>{"torch", "yaml", "pandas", "tqdm", "cv2", "pycocotools"}
                : std::vector<std::string>{"torch", "yaml", "pandas", "tqdm", "cv2"},
      "segment/val.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!fs::exists(kCoco128Seg / "coco128-seg.yaml")) GTEST_SKIP() << "coco128-seg not found at " << kCoco128Seg;
  const fs::path dir = scratch(json ? "live_json" : "live");
  const std::string data = kestrel::testing::scratch_coco128_seg(dir / "data", kImages);
  const CliResult r = kestrel::testing::run_reference_python(
      ref, std::string("tests/scripts/seg_val_reference.py val ") + kWeights + " " + data + " 160 32 0.001 " +
               dir.string() + (json ? " json" : ""));
  ASSERT_EQ(r.code, 0) << r.out;
  AllRow reference;
  ASSERT_TRUE(parse_all_row(r.out, reference)) << "no 'all' row in the reference's output:\n" << r.out;
  expect_same_row(kestrel_val(data, dir, json), reference);
  if (json)
    expect_same_masks(dir / "kestrel/predictions.json",
                      dir / "reference" / (fs::path(kWeights).stem().string() + "_predictions.json"));
  fs::remove_all(dir);
}

}  // namespace

TEST(SegValParity, RecordedReferenceNumbers) { expect_recorded(false); }
TEST(SegValParity, RecordedReferenceNumbersSaveJson) { expect_recorded(true); }
TEST(SegValParity, LiveReference) { expect_live(false); }
TEST(SegValParity, LiveReferenceSaveJson) { expect_live(true); }
