// `kestrel train --grad-compress fp16|bf16` on 2 Gloo ranks (--nproc-per-node 2): three epochs end
// with training losses within 0.5 % of the same run without compression, while the weights differ
// (the gradients really went through 16 bits); a bad value is a usage error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/safetensors_tensors.h"
#include "tests/dist/spawn.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;

namespace {

const std::string kTwoRanks =
    "train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 3 --workers 1"
    " --max-batches 2 --noplots --noval --batch-size 4 --nproc-per-node 2";

// The train/box_loss, train/obj_loss and train/cls_loss of every epoch in results.csv.
std::vector<double> train_losses(const fs::path& run) {
  std::ifstream in(run / "results.csv");
  std::string line;
  std::getline(in, line);  // header
  std::vector<double> losses;
  while (std::getline(in, line)) {
    std::stringstream row(line);
    std::string cell;
    for (int col = 0; col < 4 && std::getline(row, cell, ','); ++col)
      if (col > 0) losses.push_back(std::stod(cell));
  }
  return losses;
}

// The largest difference between the same-named tensors of two weight files.
double max_weight_difference(const fs::path& a, const fs::path& b) {
  const kestrel::SafetensorsFile fa = kestrel::load_safetensors(a.string());
  const kestrel::SafetensorsFile fb = kestrel::load_safetensors(b.string());
  double worst = 0;
  for (const std::string& name : fa.names()) {
    const std::vector<double> x = safetensors_tensor(fa, name).to_double_vector(), y = safetensors_tensor(fb, name).to_double_vector();
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  }
  return worst;
}

fs::path train(const std::string& compress) {
  const fs::path project = kestrel::testing::temp_dir("grad-compress-" + compress);
  const auto r = kestrel::testing::run_kestrel(
      kTwoRanks + " --grad-compress " + compress + " --master-port " +
      std::to_string(kestrel::testing::free_port()) + " --project " + project.string());
  EXPECT_EQ(r.code, 0) << r.out;
  return project / "exp";
}

}  // namespace

TEST(GradCompressTrain, HalfPrecisionGradientsTrainAsFp32Does) {
  const fs::path plain = train("none");
  const std::vector<double> want = train_losses(plain);
  ASSERT_EQ(want.size(), 9u);
  for (const std::string compress : {"fp16", "bf16"}) {
    SCOPED_TRACE(compress);
    const fs::path run = train(compress);
    const std::vector<double> got = train_losses(run);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 0.005 * std::abs(want[i])) << "epoch " << i / 3 << " loss " << i % 3;
      worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
    }
    std::cout << compress << ": largest relative difference of a loss from fp32's " << worst << "\n";
    EXPECT_GT(max_weight_difference(run / "weights/last.safetensors", plain / "weights/last.safetensors"), 0.0)
        << "compressed and fp32 gradients gave the same weights";
    fs::remove_all(run.parent_path());
  }
  fs::remove_all(plain.parent_path());
}

TEST(GradCompressTrain, ABadValueIsAUsageError) {
  const auto r = kestrel::testing::run_kestrel("train --device cpu --grad-compress int8");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--grad-compress must be none, fp16 or bf16, got 'int8'"), std::string::npos) << r.out;
}
