// Training follows the reference's trajectory, epoch by epoch, where nothing random is in the way:
// the first 4 images of coco128 (detection) or coco128-seg (segmentation) in one batch of 4, no
// augmentation, no val, no AutoAnchor, seed 0. reference_fixture.py train_trajectory makes
// yolov5n's (yolov5n-seg's) initial weights in float32 (init.pt), trains the reference from them
// for EPOCHS' schedule, stops it after epoch STOP and resumes its last.pt with (segment/)train.py
// --resume for MORE epochs. Kestrel then
//   - trains from the same init.pt (a fresh run): epochs 0..STOP must give the reference's train
//     losses (box, obj, cls, and seg for segmentation). This needs train.py's model.half().float() at the start (the first step's
//     gradients from unrounded weights are about 10 % away);
//   - resumes the same last.pt: epochs STOP+1..STOP+MORE must give the reference's resumed losses.
//     Batch 4 accumulates towards 64, so the warmup's windows of 2 and 3 batches (epochs here)
//     cross epoch ends, and train.py drops what an epoch's end leaves accumulated (its
//     optimizer.zero_grad() before each epoch); carrying it over moves epoch 13's losses by 0.6 %.
// Equal means within 5e-4 of the value (results.csv prints 5 significant digits; float noise
// from summation order grows to about 3e-4 by epoch 8 of this warmup, with its 0.1 bias lr).
// Live only: needs PyTorch, the reference's source tree and the dataset; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/cli.h"
#include "tests/support/coco128.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kCoco128;

namespace {

constexpr int kImages = 4, kEpochs = 40, kStop = 8, kMore = 8;
constexpr double kTolerance = 5e-4;

struct Task {
  std::string name;     // reference_fixture.py's task
  fs::path data;        // the shared dataset
  std::string command;  // kestrel's
  std::string cfg;
  int losses;           // train loss columns after the epoch
};

// results.csv's train loss columns (those after the epoch), one row per epoch.
std::vector<std::vector<double>> train_losses(const fs::path& csv, int losses) {
  std::ifstream in(csv);
  std::vector<std::vector<double>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::vector<double> row;
    std::string cell;
    for (int c = 0; c <= losses && std::getline(ss, cell, ','); ++c)
      if (c > 0) row.push_back(std::stod(cell));
    if (static_cast<int>(row.size()) == losses) rows.push_back(row);
  }
  return rows;
}

void expect_same_losses(const fs::path& kestrel_csv, const fs::path& reference_csv, const Task& task, int first,
                        int last, const char* what) {
  const auto kestrel = train_losses(kestrel_csv, task.losses), ref = train_losses(reference_csv, task.losses);
  ASSERT_GT(static_cast<int>(kestrel.size()), last) << what;
  ASSERT_GT(static_cast<int>(ref.size()), last) << what;
  for (int e = first; e <= last; ++e)
    for (int k = 0; k < task.losses; ++k)
      EXPECT_LE(std::abs(kestrel[e][k] - ref[e][k]), kTolerance * std::abs(ref[e][k]))
          << task.name << ", " << what << ": epoch " << e << " train loss column " << k + 1 << ": Kestrel "
          << kestrel[e][k] << ", reference " << ref[e][k];
}

void follow_the_reference(const Task& task) {
  kestrel::testing::Reference ref;
  const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "pandas", "tqdm", "cv2"}, "train.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!fs::exists(task.data / "labels")) GTEST_SKIP() << task.data << " not found";

  const fs::path dir = fs::temp_directory_path() /
                       ("kestrel_train_trajectory_" + task.name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CliResult r = kestrel::testing::run_reference_python(
      ref, "tests/scripts/reference_fixture.py train_trajectory " + task.data.string() + " " + dir.string() + " " +
               std::to_string(kImages) + " " + std::to_string(kEpochs) + " " + std::to_string(kStop) + " " +
               std::to_string(kMore) + " " + task.name);
  ASSERT_EQ(r.code, 0) << r.out;

  const CliResult fresh = kestrel::testing::run_kestrel(
      task.command + " --data " + (dir / "sub.yaml").string() + " --cfg " + task.cfg + " --hyp " +
      (dir / "hyp.yaml").string() + " --weights " + (dir / "init.pt").string() + " --img 160 --batch-size " +
      std::to_string(kImages) + " --epochs " + std::to_string(kEpochs) +
      " --noval --noautoanchor --noplots --no-pt --seed 0 --workers 2 --project " + dir.string() + " --name fresh");
  ASSERT_EQ(fresh.code, 0) << fresh.out;
  expect_same_losses(dir / "fresh" / "results.csv", dir / "start" / "results.csv", task, 0, kStop,
                     "a fresh run from init.pt");

  const CliResult resumed =
      kestrel::testing::run_kestrel(task.command + " --resume " + (dir / "kestrel" / "weights" / "last.pt").string());
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  expect_same_losses(dir / "kestrel" / "results.csv", dir / "reference" / "results.csv", task, kStop + 1,
                     kStop + kMore, "the reference's run resumed");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace

TEST(TrainTrajectory, DetectionFollowsTheReference) {
  follow_the_reference({"detect", kCoco128, "train", "models/yolov5n.yaml", 3});
}

TEST(TrainTrajectory, SegmentationFollowsTheReference) {
  follow_the_reference({"segment", kestrel::testing::kCoco128Seg, "segment train", "yolov5n-seg.yaml", 4});
}
