// `kestrel val` against the reference's val.py (YOLOv5 v7.0) on coco128 at 320, batch 32, for the
// same weights: tests/data/yolov5n_coco128_320.safetensors, a yolov5n Kestrel trained on coco128
// (the command is in tests/data/README.md). Rect batches follow numpy's argsort order, which
// decides each batch's letterbox shape: with a stable sort instead, the same-aspect images (most
// of coco128 is 640x480) land in other batches and every metric moves.
//
// - RecordedReferenceNumbers: kestrel's "all" row equals the reference's, recorded in
//   tests/scripts/val_parity_reference.txt (needs only coco128).
// - LiveReference: the same against the reference run now on the converted weights
//   (scripts/convert_to_ultralytics.py), where PyTorch and the reference's source are present, as
//   tests/scripts/converters_test.cpp needs them; the reference's NMS wall-clock cut-off is
//   switched off there (reference_fixture.py val), so that its numbers do not depend on speed;
//   and `kestrel val` on that same .pt (the reference's torch.save of its own model classes, read
//   by Kestrel's .pt reader) prints the reference's row too.
// - The same two with --augment (test-time augmentation: scales 1, 0.83 mirrored, 0.67), recorded
//   in tests/scripts/val_parity_augment_reference.txt.
// Each is skipped, saying what is missing, without what it needs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/cli.h"
#include "tests/support/coco128.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kCoco128;
using kestrel::testing::run_command;
using kestrel::testing::run_kestrel;
using kestrel::testing::scratch_coco128;

namespace {

const char* kWeights = "tests/data/yolov5n_coco128_320.safetensors";

// The "all" row of a validation table: images, instances, P, R, mAP50, mAP50-95.
struct AllRow {
  int images = 0, instances = 0;
  std::array<double, 4> metrics{};  // P, R, mAP50, mAP50-95
};

// The last "all" row in `text`; false when there is none.
bool parse_all_row(const std::string& text, AllRow& row) {
  static const std::regex re(R"(^\s*all\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$)");
  std::istringstream lines(text);
  bool found = false;
  for (std::string line; std::getline(lines, line);) {
    // Progress bars redraw with carriage returns; the row is the text after the last one.
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    row.images = std::stoi(m[1]);
    row.instances = std::stoi(m[2]);
    for (int i = 0; i < 4; ++i) row.metrics[i] = std::stod(m[3 + i]);
    found = true;
  }
  return found;
}

// Both tools print '%11.3g': equal to one unit in the third significant digit, which allows for
// float32 sums taken in another order.
void expect_same_row(const AllRow& kestrel, const AllRow& reference) {
  EXPECT_EQ(kestrel.images, 128);
  EXPECT_EQ(kestrel.images, reference.images);
  EXPECT_EQ(kestrel.instances, reference.instances);
  const char* names[] = {"P", "R", "mAP50", "mAP50-95"};
  for (int i = 0; i < 4; ++i) {
    const double a = kestrel.metrics[i], b = reference.metrics[i];
    const double unit = b > 0 ? std::pow(10.0, std::floor(std::log10(b)) - 2) : 1e-3;
    EXPECT_LE(std::abs(a - b), unit * 1.001) << names[i] << ": kestrel " << a << ", reference " << b;
  }
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_val_parity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

AllRow kestrel_val(const std::string& data, const fs::path& dir, bool augment = false,
                   const std::string& weights = kWeights) {
  const CliResult r = run_kestrel("val --data " + data + " --weights " + weights +
                                  " --img-size 320 --batch-size 32 --conf-thres 0.001 --iou-thres 0.6 --device cpu "
                                  "--workers 2 --exist-ok --project " + dir.string() + " --name kestrel" +
                                  (augment ? " --augment" : ""));
  EXPECT_EQ(r.code, 0) << r.out;
  AllRow row;
  EXPECT_TRUE(parse_all_row(r.out, row)) << "no 'all' row in kestrel's output:\n" << r.out;
  return row;
}

void expect_recorded(const std::string& file, bool augment) {
  if (!fs::exists(kCoco128 / "coco128.yaml")) GTEST_SKIP() << "coco128 not found at " << kCoco128;
  std::ifstream recorded(file);
  const std::string text((std::istreambuf_iterator<char>(recorded)), std::istreambuf_iterator<char>());
  AllRow reference;
  ASSERT_TRUE(parse_all_row(text, reference)) << "no 'all' row in " << file;
  const fs::path dir = scratch(augment ? "recorded_augment" : "recorded");
  const AllRow kestrel = kestrel_val(scratch_coco128(dir / "coco128"), dir, augment);
  expect_same_row(kestrel, reference);
  fs::remove_all(dir);
}

void expect_live(bool augment) {
  kestrel::testing::Reference ref;
  const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "pandas", "tqdm", "cv2"}, "val.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!fs::exists(kCoco128 / "coco128.yaml")) GTEST_SKIP() << "coco128 not found at " << kCoco128;

  const fs::path dir = scratch(augment ? "live_augment" : "live");
  const std::string data = scratch_coco128(dir / "coco128");
  const std::string pt = (dir / "weights.pt").string();
  CliResult r = kestrel::testing::run_reference_python(
      ref, std::string("scripts/convert_to_ultralytics.py ") + kWeights + " " + pt + " --yolov5 " + ref.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = kestrel::testing::run_reference_python(ref, "tests/scripts/reference_fixture.py val " + pt + " " + data +
                                                      " 320 32 0.001 " + dir.string() + (augment ? " augment" : ""));
  ASSERT_EQ(r.code, 0) << r.out;
  AllRow reference;
  ASSERT_TRUE(parse_all_row(r.out, reference)) << "no 'all' row in the reference's output:\n" << r.out;
  expect_same_row(kestrel_val(data, dir, augment), reference);
  // The reference's own file, read by Kestrel's .pt reader, validates the same.
  expect_same_row(kestrel_val(data, dir, augment, pt), reference);
  fs::remove_all(dir);
}

}  // namespace

TEST(ValParity, RecordedReferenceNumbers) { expect_recorded("tests/scripts/val_parity_reference.txt", false); }

TEST(ValParity, LiveReference) { expect_live(false); }

// --augment: the reference's _forward_augment, its scale_img and NMS over the joined passes.
TEST(ValParity, RecordedReferenceNumbersAugmented) {
  expect_recorded("tests/scripts/val_parity_augment_reference.txt", true);
}

TEST(ValParity, LiveReferenceAugmented) { expect_live(true); }
