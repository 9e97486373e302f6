// Rectangular batch shapes for known aspect ratios, and coco128 at 320 against the reference's
// recorded batches (tests/yolo/data/coco128_rect_320.txt, from scripts/record_reference_rect.py)
// when the dataset is present: same images in the same batches, same letterbox shapes.
#include "yolo/data/rect_batches.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "yolo/data/augment_pipeline.h"
#include "yolo/data/dataset_config.h"

using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

struct Setting {
  int batch = 0, img = 0, stride = 0;
  double pad = 0;
  std::vector<std::string> order;  // file names
  std::vector<std::array<int, 2>> shapes;
};

std::vector<Setting> read_settings(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path << " (tests run from the source root)";
  std::vector<Setting> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string tag;
    f >> tag;
    if (tag == "setting") {
      out.emplace_back();
      f >> out.back().batch >> out.back().img >> out.back().stride >> out.back().pad;
    } else if (tag == "order") {
      for (std::string name; f >> name;) out.back().order.push_back(name);
    } else if (tag == "shapes") {
      for (int h, w; f >> h >> w;) out.back().shapes.push_back({h, w});
    }
  }
  return out;
}

}  // namespace

TEST(RectBatches, ShapesOfKnownAspectRatios) {
  // (w, h): aspect ratios 0.75, 0.5, 1.333, 1.0 -> sorted 0.5, 0.75 | 1.0, 1.333.
  const RectBatches rb = rect_batches({{640, 480}, {640, 320}, {480, 640}, {640, 640}}, 2, 640,
                                      32, 0.5);
  EXPECT_EQ(rb.order, (std::vector<int64_t>{1, 0, 3, 2}));
  ASSERT_EQ(rb.shapes.size(), 2u);
  // Batch 0 is all wide: [0.75, 1] * 640 / 32 + 0.5 = [15.5, 20.5] -> [16, 21] * 32.
  EXPECT_EQ(rb.shapes[0], (std::array<int, 2>{512, 672}));
  // Batch 1 holds a square image: [1, 1] -> 21 * 32.
  EXPECT_EQ(rb.shapes[1], (std::array<int, 2>{672, 672}));
  // All tall, no padding: [1, 1 / 1.5] * 320 / 32 = [10, 6.67] -> [10, 7] * 32.
  const RectBatches tall = rect_batches({{200, 300}, {100, 150}}, 4, 320, 32, 0.0);
  ASSERT_EQ(tall.shapes.size(), 1u);
  EXPECT_EQ(tall.shapes[0], (std::array<int, 2>{320, 224}));
}

TEST(RectBatches, TiesAreOrderedAsNumpyArgsort) {
  // 17 images of one shape: past numpy's insertion-sort cut, so the introsort's partitioning
  // reorders them (a stable sort would keep 0..16).
  const std::vector<std::array<int, 2>> wh(17, {640, 480});
  const RectBatches rb = rect_batches(wh, 4, 320, 32, 0.0);
  std::vector<int64_t> identity(17);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(rb.order, identity);
  std::vector<int64_t> sorted = rb.order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
}

TEST(RectBatches, Coco128MatchesTheReferenceAt320) {
  const std::string yaml = "/work/shared/datasets/coco128/coco128.yaml";
  if (!fs::exists(yaml)) GTEST_SKIP() << "coco128 not found at " << yaml;
  const DatasetConfig cfg = load_dataset_config(yaml);
  const DatasetSplit split = load_split(cfg, "val", cfg.nc, false, /*use_cache=*/false);
  const std::vector<Setting> settings = read_settings("tests/yolo/data/coco128_rect_320.txt");
  ASSERT_EQ(settings.size(), 2u);
  for (const Setting& s : settings) {
    PipelineOptions o;
    o.img_size = s.img;
    o.rect = true;
    o.batch_size = s.batch;
    o.stride = s.stride;
    o.pad = s.pad;
    const AugmentPipeline pipeline(split.records, o);
    ASSERT_EQ(pipeline.size(), static_cast<int64_t>(s.order.size()));
    for (int64_t i = 0; i < pipeline.size(); ++i)
      EXPECT_EQ(fs::path(pipeline.record(i).image_path).filename().string(), s.order[i])
          << "position " << i << " (batch " << s.batch << ", pad " << s.pad << ")";
    EXPECT_EQ(pipeline.batch_shapes(), s.shapes) << "batch " << s.batch << ", pad " << s.pad;
  }
}
