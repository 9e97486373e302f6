// --half on a GPU: val and detect run the model in float16 (the reference's half=True on CUDA),
// with and without --augment, and find what float32 finds: the same detections to float16's
// precision (boxes within 1 pixel in 128, confidences within 2e-3 absolute of the float32 run's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/data/synthetic.h"

namespace fs = std::filesystem;

namespace {

using kestrel::testing::CliResult;
CliResult run(const std::string& args) { return kestrel::testing::run_kestrel(args); }
bool mentions(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
const char* kWeights = "tests/data/yolov5n_coco128_320.safetensors";

fs::path images_of(const fs::path& dir, int n) {
  const fs::path synthetic =
      fs::path(kestrel::yolo::data::ensure_synthetic_dataset(kestrel::yolo::data::default_synthetic_dir())).parent_path();
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(synthetic / "images" / "val")) all.push_back(e.path());
  std::sort(all.begin(), all.end());
  fs::create_directories(dir / "images");
  for (int i = 0; i < n; ++i) fs::copy_file(all[i], dir / "images" / all[i].filename());
  return dir / "images";
}

// class, x, y, w, h, conf of every label file under `labels`, sorted.
std::vector<std::vector<double>> rows_of(const fs::path& labels) {
  std::vector<std::vector<double>> rows;
  for (const auto& e : fs::directory_iterator(labels)) {
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::vector<double> row(6);
      for (double& v : row) words >> v;
      rows.push_back(row);
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace

TEST(ValDetectHalfCuda, Float16FindsWhatFloat32Finds) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const fs::path dir = fs::temp_directory_path() / "kestrel_val_detect_half_cuda";
  fs::remove_all(dir);
  const fs::path images = images_of(dir, 4);
  for (const char* augment : {"", " --augment"}) {
    std::vector<std::vector<double>> rows[2];
    for (int half = 0; half < 2; ++half) {
      const std::string name = std::string(half ? "half" : "full") + (*augment ? "_tta" : "");
      const CliResult r = run("detect --weights " + std::string(kWeights) + " --source " + images.string() +
                              " --img 128 --conf 0.01 --save-txt --save-conf --nosave --device 0" + augment +
                              (half ? " --half" : "") + " --project " + dir.string() + " --name " + name);
      ASSERT_EQ(r.code, 0) << r.out;
      EXPECT_FALSE(mentions(r.out, "--half is ignored")) << r.out;
      rows[half] = rows_of(dir / name / "labels");
    }
    ASSERT_FALSE(rows[0].empty()) << "float32 found nothing at conf 0.01" << augment;
    // Rows near the confidence threshold may cross it in float16: most must match.
    size_t matched = 0;
    for (const auto& a : rows[0])
      for (const auto& b : rows[1])
        if (a[0] == b[0] && std::abs(a[1] - b[1]) < 1.0 / 128 && std::abs(a[2] - b[2]) < 1.0 / 128 &&
            std::abs(a[5] - b[5]) < 2e-3) {
          ++matched;
          break;
        }
    EXPECT_GE(matched * 10, rows[0].size() * 9) << matched << " of " << rows[0].size() << augment;
  }

  const CliResult val = run("val --weights " + std::string(kWeights) + " --data synthetic --single-cls --img 128 "
                            "--batch 16 --device 0 --half --augment --workers 1 --project " + (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  EXPECT_FALSE(mentions(val.out, "--half is ignored")) << val.out;
  EXPECT_TRUE(mentions(val.out, "all        100")) << val.out;
  fs::remove_all(dir);
}
