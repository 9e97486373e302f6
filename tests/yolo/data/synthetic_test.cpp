// The built-in synthetic dataset: images are a pure function of (seed, stream), boxes are tight
// around the shapes, the generated files are byte-identical across generations, the marker
// decides regeneration, and the result loads cleanly through the dataset yaml.
#include "yolo/data/synthetic.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <opencv2/imgproc.hpp>

#include "tests/support/testing.h"
#include "yolo/data/dataset_config.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Relative path -> contents of every regular file under root.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) files[fs::relative(e.path(), root).string()] = read_all(e.path());
  return files;
}

}  // namespace

TEST(SyntheticImage, IsAPureFunctionOfSeedAndStream) {
  const SyntheticImage a = render_synthetic_image(1, 7), b = render_synthetic_image(1, 7);
  const SyntheticImage c = render_synthetic_image(1, 8);
  ASSERT_EQ(a.image.size(), b.image.size());
  EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0);
  EXPECT_EQ(a.boxes, b.boxes);
  EXPECT_TRUE(a.image.size() != c.image.size() || cv::norm(a.image, c.image, cv::NORM_INF) > 0);
}

TEST(SyntheticImage, BoxesAreTightAndTheSetIsVaried) {
  int per_class[kSyntheticClasses] = {}, at_border = 0, overlapping = 0, images = 60;
  for (int i = 0; i < images; ++i) {
    const SyntheticImage s = render_synthetic_image(3, i);
    const int w = s.image.cols, h = s.image.rows;
    EXPECT_EQ(w, 320);
    EXPECT_TRUE(h >= 240 && h <= 320) << h;
    EXPECT_FALSE(s.boxes.empty());
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      const LabelBox& b = s.boxes[k];
      ASSERT_TRUE(b.cls >= 0 && b.cls < kSyntheticClasses);
      ++per_class[b.cls];
      // Box in pixels; the shape's visible pixels must lie inside it and reach most of it
      // (shapes stay at least 60% visible under later ones).
      const cv::Rect box(std::lround((b.x - b.w / 2) * w), std::lround((b.y - b.h / 2) * h),
                         std::lround(b.w * w), std::lround(b.h * h));
      cv::Mat visible = s.owner == static_cast<int>(k);
      const cv::Rect seen = cv::boundingRect(visible);
      ASSERT_GT(seen.area(), 0) << "image " << i << " box " << k << " is not visible at all";
      EXPECT_EQ(seen & box, seen) << "image " << i << " box " << k << " misses visible pixels";
      EXPECT_GE(seen.area(), box.area() * 0.4) << "image " << i << " box " << k << " is loose";
      if (box.x == 0 || box.y == 0 || box.br().x == w || box.br().y == h) ++at_border;
      // Pixels of this shape's box owned by another shape: an overlap.
      cv::Mat others = (s.owner(box) != static_cast<int>(k)) & (s.owner(box) >= 0);
      if (cv::countNonZero(others) > 0) ++overlapping;
    }
  }
  for (int c = 0; c < kSyntheticClasses; ++c) EXPECT_GT(per_class[c], 20) << kSyntheticNames[c];
  EXPECT_GT(at_border, 10);
  EXPECT_GT(overlapping, 10);
}

TEST(SyntheticDataset, ReproducibleMarkedAndLoadable) {
  const fs::path base = fs::temp_directory_path() / ("kestrel_synth_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const std::string yaml_a = ensure_synthetic_dataset((base / "a").string());
  EXPECT_EQ(yaml_a, (base / "a" / "synthetic.yaml").string());
  EXPECT_EQ(resolve_data_argument("synthetic", (base / "a").string()), yaml_a);
  EXPECT_EQ(resolve_data_argument("data/coco128.yaml", (base / "a").string()), "data/coco128.yaml");
  const auto files_a = snapshot(base / "a");
  // 400 images, 400 label files, the yaml and the marker.
  EXPECT_EQ(files_a.size(), 802u);
  EXPECT_TRUE(kestrel::testing::temporaries_of((base / "a").string()).empty());

  // Present and marked: not regenerated (an image removed stays removed).
  const fs::path some_image = base / "a" / "images" / "val" / "000042.jpg";
  fs::remove(some_image);
  ensure_synthetic_dataset((base / "a").string());
  EXPECT_FALSE(fs::exists(some_image));

  // A folder from an older generator (other marker, stray files): replaced by a fresh generation,
  // byte-identical to the first one made in the other folder.
  fs::create_directories(base / "b" / "images" / "train");
  std::ofstream(base / "b" / "generator.txt") << "kestrel-synthetic v0\n";
  std::ofstream(base / "b" / "images" / "train" / "stray.jpg") << "old";
  ensure_synthetic_dataset((base / "b").string());
  EXPECT_TRUE(snapshot(base / "b") == files_a) << "two generations differ";

  const DatasetConfig cfg = load_dataset_config((base / "b" / "synthetic.yaml").string());
  EXPECT_EQ(cfg.nc, kSyntheticClasses);
  EXPECT_EQ(cfg.names[3], "cross");
  const DatasetSplit train = load_split(cfg, "train", cfg.nc, false, true);
  const DatasetSplit val = load_split(cfg, "val", cfg.nc, false, true);
  EXPECT_EQ(train.counts, (ScanCounts{kSyntheticTrainImages, 0, 0, 0, kSyntheticTrainImages}));
  EXPECT_EQ(val.counts, (ScanCounts{kSyntheticValImages, 0, 0, 0, kSyntheticValImages}));
  EXPECT_TRUE(train.warnings.empty()) << train.warnings.front();
  // The labels read back equal the generator's boxes (6 decimals in the files).
  const SyntheticImage first = render_synthetic_image(kSyntheticSeed, 0);
  ASSERT_EQ(train.records[0].boxes.size(), first.boxes.size());
  for (size_t k = 0; k < first.boxes.size(); ++k) {
    EXPECT_EQ(train.records[0].boxes[k].cls, first.boxes[k].cls);
    EXPECT_NEAR(train.records[0].boxes[k].x, first.boxes[k].x, 1e-6);
    EXPECT_NEAR(train.records[0].boxes[k].h, first.boxes[k].h, 1e-6);
  }
  EXPECT_EQ(train.records[0].height, first.image.rows);
  fs::remove_all(base);
}

TEST(SyntheticDataset, DefaultFolderFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  ::setenv("XDG_CACHE_HOME", "/somewhere/cache", 1);
  EXPECT_EQ(default_synthetic_dir(), "/somewhere/cache/kestrel/synthetic-v1");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/who", 1);
  EXPECT_EQ(default_synthetic_dir(), "/home/who/.cache/kestrel/synthetic-v1");
  if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) ::setenv("HOME", saved_home.c_str(), 1);
}
