// `kestrel classify val` against the reference's classify/val.py (YOLOv5 v7.0) on coco128-cls at
// 64, batch 32, for tests/data/yolov5n_cls_coco128_64.pt (a yolov5n-cls the reference trained, read
// by Kestrel's .pt reader):
// - RecordedReferenceNumbers: every row of Kestrel's table (all, then each class: images, top-1,
//   top-5) equals the reference's, recorded in tests/scripts/classify_val_reference.txt (needs only
//   coco128-cls);
// - LiveReference: the same against the reference run now (tests/scripts/classify_reference.py
//   val), where PyTorch, torchvision and the reference's source are present;
// Each is skipped, saying what is missing, without what it needs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/scripts/classify_table.h"
#include "tests/support/cli.h"
#include "tests/support/coco128.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kCoco128Cls;
using kestrel::testing::run_kestrel;

namespace {

const char* kWeights = "tests/data/yolov5n_cls_coco128_64.pt";

using kestrel::testing::classify_table_rows;

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_classify_parity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<std::string> kestrel_rows(const fs::path& dir, const std::string& weights = kWeights) {
  const CliResult r = run_kestrel("classify val --data " + kCoco128Cls.string() + " --weights " + weights +
                                  " --img 64 --batch 32 --device cpu --workers 2 --exist-ok --project " + dir.string() +
                                  " --name kestrel");
  EXPECT_EQ(r.code, 0) << r.out;
  return classify_table_rows(r.out);
}

}  // namespace

TEST(ClassifyValParity, RecordedReferenceNumbers) {
  if (!fs::exists(kCoco128Cls / "val")) GTEST_SKIP() << "coco128-cls not found at " << kCoco128Cls;
  std::ifstream in("tests/scripts/classify_val_reference.txt");
  const std::string recorded((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::string> reference = classify_table_rows(recorded);
  ASSERT_EQ(reference.size(), 11u) << recorded;
  const fs::path dir = scratch("recorded");
  EXPECT_EQ(kestrel_rows(dir), reference);
  fs::remove_all(dir);
}

TEST(ClassifyValParity, LiveReference) {
  kestrel::testing::Reference ref;
  const std::string missing =
      kestrel::testing::find_reference(ref, {"torch", "torchvision", "yaml", "pandas", "tqdm", "cv2"}, "classify/val.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!fs::exists(kCoco128Cls / "val")) GTEST_SKIP() << "coco128-cls not found at " << kCoco128Cls;
  const CliResult r = kestrel::testing::run_reference_python(
      ref, std::string("tests/scripts/classify_reference.py val ") + kWeights + " " + kCoco128Cls.string() + " 64 32");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> reference = classify_table_rows(r.out);
  ASSERT_GE(reference.size(), 11u) << r.out;
  reference.resize(11);  // val.py's table (the script repeats it)
  const fs::path dir = scratch("live");
  EXPECT_EQ(kestrel_rows(dir), reference);
  fs::remove_all(dir);
}
