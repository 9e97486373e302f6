#include "yolo/data/augment_pipeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <opencv2/imgproc.hpp>
#include <random>
#include <unistd.h>

#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

class AugmentPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("kestrel_pipeline_") + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // Eight images of assorted shapes, half noise and half smooth, with one to three boxes.
    const int sizes[8][2] = {{64, 48}, {48, 64}, {96, 40}, {40, 96}, {80, 80}, {120, 70}, {30, 50}, {70, 70}};
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0.2f, 0.8f);
    for (int i = 0; i < 8; ++i) {
      cv::Mat img(sizes[i][1], sizes[i][0], CV_8UC3);
      cv::randu(img, 0, 256);
      if (i % 2) cv::GaussianBlur(img, img, cv::Size(7, 7), 2);
      ImageRecord r{(dir_ / ("im" + std::to_string(i) + ".png")).string(), img.cols, img.rows, {}};
      write_png(r.image_path, img);
      for (int k = 0; k <= i % 3; ++k) r.boxes.push_back({k, u(rng), u(rng), 0.25f, 0.3f});
      records_.push_back(r);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::vector<ImageRecord> records_;
};

// The mosaic sample as the pipeline made it before the fused warp, written out step by step from
// the augmentations (augment.h): a 2s canvas, random_perspective, mixup, HSV, flips, RGB.
Sample canvas_path_mosaic(const std::vector<ImageRecord>& records, const PipelineOptions& o,
                          int64_t index, Generator& gen) {
  const int s = o.img_size, n = static_cast<int>(records.size());
  auto mosaic = [&](int64_t first) {
    const int yc = static_cast<int>(gen.uniform(s / 2, 3 * s / 2));
    const int xc = static_cast<int>(gen.uniform(s / 2, 3 * s / 2));
    std::array<int64_t, 4> picks{first, 0, 0, 0};
    for (int k = 1; k < 4; ++k) picks[k] = static_cast<int64_t>(gen.randint(n));
    for (int k = 3; k > 0; --k) std::swap(picks[k], picks[gen.randint(k + 1)]);
    std::array<cv::Mat, 4> tiles;
    std::array<std::vector<LabelBox>, 4> labels;
    for (int k = 0; k < 4; ++k) {
      tiles[k] = load_image(records[picks[k]].image_path, s, true).image;
      labels[k] = records[picks[k]].boxes;
    }
    Mosaic m = place_mosaic(tiles, labels, s, xc, yc);
    return random_perspective(m.image, m.boxes, draw_perspective(gen, o.hyp), -s / 2);
  };
  EXPECT_LT(gen.uniform(), o.hyp.mosaic);
  Warped w = mosaic(index);
  if (gen.uniform() < o.hyp.mixup) {
    Warped other = mosaic(static_cast<int64_t>(gen.randint(n)));
    w.image = blend(w.image, other.image, sample_beta(gen, 32.0, 32.0));
    w.boxes.insert(w.boxes.end(), other.boxes.begin(), other.boxes.end());
  }
  Sample out;
  out.labels = to_normalised_boxes(w.boxes, s, s);
  augment_hsv(w.image, o.hyp.hsv_h, o.hyp.hsv_s, o.hyp.hsv_v, gen);
  if (gen.uniform() < o.hyp.flipud) flip_ud(w.image, out.labels);
  if (gen.uniform() < o.hyp.fliplr) flip_lr(w.image, out.labels);
  cv::cvtColor(w.image, out.image, cv::COLOR_BGR2RGB);
  return out;
}

// Same draws, same boxes, same pixels: the one-pass mosaic (no canvas, flips inside the warp,
// HSV converted straight to RGB) against the canvas path, with the default hyperparameters, with
// mixup, up-down flips, rotation and shear, and with a projective term (the canvas path itself).
TEST_F(AugmentPipelineTest, FusedMosaicEqualsTheCanvasPath) {
  std::vector<PipelineOptions> variants(3);
  variants[1].hyp.mixup = 0.5, variants[1].hyp.flipud = 0.5;
  variants[1].hyp.degrees = 20, variants[1].hyp.shear = 5;
  variants[2].hyp.perspective = 0.0005, variants[2].hyp.flipud = 0.5;
  for (size_t v = 0; v < variants.size(); ++v) {
    PipelineOptions& o = variants[v];
    o.img_size = 96;
    o.augment = true;
    const AugmentPipeline pipeline(records_, o);
    for (int64_t i = 0; i < 16; ++i) {
      Generator g1 = sample_generator(9, 0, v, i % 8), g2 = sample_generator(9, 0, v, i % 8);
      if (i >= 8) g1 = g2 = sample_generator(9, 1, v, i);  // another rank's draws
      const Sample fused = pipeline.get(i % 8, g1);
      const Sample expected = canvas_path_mosaic(records_, o, i % 8, g2);
      ASSERT_EQ(fused.image.size(), expected.image.size());
      EXPECT_EQ(cv::norm(fused.image, expected.image, cv::NORM_INF), 0) << "variant " << v << " sample " << i;
      EXPECT_EQ(fused.labels, expected.labels) << "variant " << v << " sample " << i;
      EXPECT_EQ(g1.uniform(), g2.uniform()) << "the two paths drew different numbers";
    }
  }
}

}  // namespace
