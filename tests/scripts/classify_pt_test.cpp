// Classification runs write classify/train.py's own checkpoints, weights/best.pt and last.pt,
// beside the .safetensors (issue 41: the reference's tools read Kestrel's runs):
// - KestrelReadsItsOwnPt: `kestrel classify val` on best.pt (Kestrel's .pt reader) prints the table
//   it prints on best.safetensors; last.pt is a torch.save zip;
// - LiveReferenceReadsIt: the reference's classify/val.py (tests/scripts/classify_reference.py val)
//   on Kestrel's best.pt prints Kestrel's table, every class's top-1 and top-5, where PyTorch,
//   torchvision and the reference's source are present (skipped, saying what is missing, elsewhere).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/scripts/classify_table.h"
#include "tests/support/cli.h"
#include "tests/yolo/cli/classify_folder.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

namespace {

using kestrel::testing::classify_table_rows;

// One small run, shared by the cases: three colour classes, 12 epochs at 32 px (enough to learn
// them: the tables then say more than chance).
class ClassifyPt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kestrel_classify_pt_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    kestrel::testing::make_classify_folder(dir_ / "data", {"a", "b", "c"}, 8, 4);
    const CliResult r = run_kestrel("classify train --model yolov5n.yaml --data " + (dir_ / "data").string() +
                                    " --epochs 12 --img 32 --batch-size 8 --workers 1 --device cpu --noplots"
                                    " --no-tensorboard --project " + (dir_ / "runs").string() + " --name run");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static fs::path weights(const std::string& name) { return dir_ / "runs" / "run" / "weights" / name; }
  static std::vector<std::string> kestrel_rows(const fs::path& w) {
    const CliResult r = run_kestrel("classify val --data " + (dir_ / "data").string() + " --weights " + w.string() +
                                    " --img 32 --batch-size 8 --device cpu --workers 1 --exist-ok --project " +
                                    (dir_ / "val").string() + " --name v");
    EXPECT_EQ(r.code, 0) << r.out;
    return classify_table_rows(r.out);
  }

  static fs::path dir_;
};
fs::path ClassifyPt::dir_;

}  // namespace

TEST_F(ClassifyPt, KestrelReadsItsOwnPt) {
  for (const char* name : {"best.pt", "last.pt"}) {
    std::ifstream in(weights(name), std::ios::binary);
    char magic[2] = {};
    in.read(magic, 2);
    EXPECT_TRUE(magic[0] == 'P' && magic[1] == 'K') << name << " is no torch.save zip";
  }
  const std::vector<std::string> from_safetensors = kestrel_rows(weights("best.safetensors"));
  ASSERT_EQ(from_safetensors.size(), 4u);  // all, then a, b, c
  EXPECT_EQ(kestrel_rows(weights("best.pt")), from_safetensors);
}

// Each image's predictions ("PATH: HxW class p, class p, ..." without the time), the class and
// probability pairs sorted (two classes whose probabilities tie at two decimals may come in either
// order).
std::map<std::string, std::string> predictions(const std::string& text) {
  static const std::regex re(R"(image \d+/\d+ (\S+): \d+x\d+ (.*), [\d.]+ms)");
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    std::vector<std::string> pairs;
    std::istringstream items(m[2].str());
    for (std::string item; std::getline(items, item, ',');) pairs.push_back(item.substr(item.find_first_not_of(' ')));
    std::sort(pairs.begin(), pairs.end());
    std::string joined;
    for (const auto& p : pairs) joined += p + "; ";
    out[m[1].str()] = joined;
  }
  return out;
}

TEST_F(ClassifyPt, LiveReferenceReadsIt) {
  kestrel::testing::Reference ref;
  const std::string missing =
      kestrel::testing::find_reference(ref, {"torch", "torchvision", "yaml", "pandas", "tqdm", "cv2"}, "classify/val.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  const CliResult r = kestrel::testing::run_reference_python(
      ref, "tests/scripts/classify_reference.py val " + weights("best.pt").string() + " " + (dir_ / "data").string() + " 32 8");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> reference = classify_table_rows(r.out);
  ASSERT_GE(reference.size(), 4u) << r.out;
  reference.resize(4);  // val.py's table (the script repeats it)
  EXPECT_EQ(kestrel_rows(weights("best.safetensors")), reference) << r.out;
  // The forward itself: every image's class probabilities (classify/predict.py on Kestrel's best.pt
  // against `kestrel classify predict` on best.safetensors).
  const fs::path images = dir_ / "data" / "val" / "a";
  const CliResult ref_predict = kestrel::testing::run_reference_python(
      ref, "tests/scripts/classify_reference.py predict " + weights("best.pt").string() + " " + images.string() + " 32");
  ASSERT_EQ(ref_predict.code, 0) << ref_predict.out;
  const CliResult own = run_kestrel("classify predict --weights " + weights("best.safetensors").string() + " --source " +
                                    images.string() + " --img 32 --device cpu --nosave --exist-ok --project " +
                                    (dir_ / "predict").string() + " --name p");
  ASSERT_EQ(own.code, 0) << own.out;
  const auto theirs = predictions(ref_predict.out), ours = predictions(own.out);
  EXPECT_EQ(theirs.size(), 4u) << ref_predict.out;
  EXPECT_EQ(ours, theirs) << ref_predict.out << "\n" << own.out;
}
