// SegLoader over a tiny synthetic polygon dataset written to a temporary folder: the batch layout
// (images, targets, masks with and without overlap), overlap values naming targets rows of their
// own image, batches independent of the worker count and equal to build_batch, rect validation
// batches with their shapes, and --quad refused.
#include "yolo/data/seg_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/seg_scan.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

class SegLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_seg_loader_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "images");
    fs::create_directories(dir_ / "labels");
    // Seven images, wide and tall; image i holds i % 3 + 1 triangles (the last image none: a
    // background without a label file).
    std::vector<std::string> paths;
    for (int i = 0; i < 7; ++i) {
      const int w = i % 2 ? 48 : 80, h = i % 2 ? 72 : 56;
      cv::Mat img(h, w, CV_8UC3, cv::Scalar(20 * i, 100, 200 - 20 * i));
      const std::string name = "s" + std::to_string(i);
      paths.push_back((dir_ / "images" / (name + ".png")).string());
      write_png(paths.back(), img);
      if (i == 6) continue;
      std::ofstream labels(dir_ / "labels" / (name + ".txt"));
      for (int k = 0; k <= i % 3; ++k) {
        const double x = 0.1 + 0.25 * k, y = 0.15 + 0.1 * i;
        labels << k << " " << x << " " << y << " " << x + 0.3 << " " << y + 0.05 << " " << x + 0.1 << " " << y + 0.3 << "\n";
      }
    }
    ThreadPool pool(2);
    records_ = scan_segment_images(paths, 3, pool).records;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::shared_ptr<SegAugmentPipeline> pipeline(bool augment, bool overlap, bool rect = false) const {
    PipelineOptions o;
    o.img_size = 64;
    o.augment = augment;
    o.rect = rect;
    o.pad = rect ? 0.5 : 0.0;
    o.batch_size = 3;
    o.hyp.mixup = 0.5;
    o.hyp.copy_paste = 0.5;
    o.hyp.flipud = 0.5;
    return std::make_shared<SegAugmentPipeline>(records_, o, SegMaskOptions{4, overlap});
  }
  static LoaderOptions options(int workers) {
    LoaderOptions o;
    o.batch_size = 3;
    o.workers = workers;
    o.seed = 11;
    o.pin_memory = false;
    return o;
  }

  fs::path dir_;
  std::vector<ImageRecord> records_;
};

std::vector<SegBatch> epoch_of(SegLoader& loader, int64_t epoch) {
  std::vector<SegBatch> out;
  loader.start_epoch(epoch);
  while (std::optional<SegBatch> b = loader.next()) out.push_back(std::move(*b));
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.numel() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0);
}

bool same(const SegBatch& a, const SegBatch& b) {
  return a.index == b.index && a.paths == b.paths && same_bytes(a.images, b.images) &&
         same_bytes(a.targets, b.targets) && same_bytes(a.masks, b.masks);
}

// Per image of the batch, its targets rows.
std::vector<int64_t> rows_per_image(const SegBatch& b) {
  std::vector<int64_t> rows(b.size(), 0);
  const float* t = b.targets.data<float>();
  for (int64_t r = 0; r < b.targets.shape()[0]; ++r) ++rows.at(static_cast<size_t>(t[r * 6]));
  return rows;
}

}  // namespace

TEST_F(SegLoaderTest, OverlapBatchHoldsOneMaskImagePerSample) {
  SegLoader loader(pipeline(true, true), options(2), sequential_order(7));
  EXPECT_EQ(loader.len(), 3);
  for (int64_t epoch = 0; epoch < 2; ++epoch)
    for (const SegBatch& b : epoch_of(loader, epoch)) {
      EXPECT_TRUE(b.overlap);
      ASSERT_EQ(b.images.shape(), (Shape{b.size(), 64, 64, 3}));
      ASSERT_EQ(b.masks.shape(), (Shape{b.size(), 16, 16}));
      EXPECT_EQ(b.masks.dtype(), DType::F32);
      const std::vector<int64_t> rows = rows_per_image(b);
      const float* m = b.masks.data<float>();
      for (int64_t i = 0; i < b.size(); ++i) {
        float hi = 0;
        for (int64_t p = 0; p < 16 * 16; ++p) {
          const float v = m[i * 256 + p];
          EXPECT_EQ(v, std::floor(v));
          EXPECT_GE(v, 0);
          hi = std::max(hi, v);
        }
        EXPECT_LE(hi, rows[i]) << "image " << i << " of batch " << b.index;
        if (rows[i] > 0) {
          EXPECT_GE(hi, 1) << "image " << i << " of batch " << b.index;
        }
      }
    }
}

TEST_F(SegLoaderTest, WithoutOverlapOneMaskPerTargetsRow) {
  SegLoader loader(pipeline(true, false), options(0), sequential_order(7));
  for (const SegBatch& b : epoch_of(loader, 0)) {
    EXPECT_FALSE(b.overlap);
    ASSERT_EQ(b.masks.shape(), (Shape{b.targets.shape()[0], 16, 16}));
    const float* m = b.masks.data<float>();
    for (int64_t p = 0; p < b.masks.numel(); ++p) EXPECT_TRUE(m[p] == 0 || m[p] == 1);
  }
}

TEST_F(SegLoaderTest, BatchesDoNotDependOnWorkers) {
  for (bool overlap : {true, false}) {
    SegLoader one(pipeline(true, overlap), options(1), sequential_order(7));
    SegLoader three(pipeline(true, overlap), options(3), sequential_order(7));
    const std::vector<SegBatch> a = epoch_of(one, 1), b = epoch_of(three, 1);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same(a[i], b[i])) << "batch " << i << (overlap ? " overlap" : "");
      EXPECT_TRUE(same(a[i], one.build_batch(1, static_cast<int64_t>(i)))) << "batch " << i;
    }
  }
}

TEST_F(SegLoaderTest, RectValidationBatchesKeepShapes) {
  SegLoader loader(pipeline(false, true, true), options(2), sequential_order(7));
  for (const SegBatch& b : epoch_of(loader, 0)) {
    const int64_t h = b.images.shape()[1], w = b.images.shape()[2];
    EXPECT_EQ(h % 32, 0);
    EXPECT_EQ(w % 32, 0);
    ASSERT_EQ(b.masks.shape(), (Shape{b.size(), h / 4, w / 4}));
    for (const std::optional<SampleShapes>& s : b.shapes) EXPECT_TRUE(s.has_value());
  }
}

TEST_F(SegLoaderTest, QuadIsRefused) {
  LoaderOptions o = options(0);
  o.quad = true;
  const std::string e = kestrel::testing::error_of([&] { SegLoader(pipeline(true, true), o, sequential_order(7)); });
  EXPECT_NE(e.find("--quad"), std::string::npos) << e;
}
