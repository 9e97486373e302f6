#include "yolo/data/image_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <unistd.h>

#include "base/error.h"
#include "yolo/data/augment_pipeline.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

LoadedImage image_of(int w, int h, uchar v) { return {cv::Mat(h, w, CV_8UC3, cv::Scalar::all(v)), h, w}; }

TEST(ImageCache, KeepsWhatFitsTheBudgetAndNothingTwice) {
  ImageCache cache(4, 2 * 10 * 10 * 3);  // room for two 10x10 images
  EXPECT_FALSE(cache.find(0));
  cache.offer(0, image_of(10, 10, 1));
  cache.offer(0, image_of(10, 10, 9));  // already kept: the first stays
  cache.offer(1, image_of(10, 10, 2));
  cache.offer(2, image_of(10, 10, 3));  // over the budget
  EXPECT_EQ(cache.images(), 2);
  EXPECT_EQ(cache.bytes(), 600);
  ASSERT_TRUE(cache.find(0));
  EXPECT_EQ(cache.find(0)->image.at<cv::Vec3b>(0, 0)[0], 1);
  EXPECT_EQ(cache.find(1)->w0, 10);
  EXPECT_FALSE(cache.find(2));
  EXPECT_THROW(cache.find(4), std::out_of_range);
}

// An image in a loader thread's reused buffer (or a view) is copied: the thread's next image
// overwrites the buffer, the kept image stays. An image owning its memory is shared.
TEST(ImageCache, CopiesImagesThatDoNotOwnTheirMemory) {
  ImageCache cache(3, 1 << 20);
  PixelBuffer buffer;
  cv::Mat in_buffer = buffer.image(10, 10, CV_8UC3);
  in_buffer.setTo(cv::Scalar::all(7));
  cache.offer(0, {in_buffer, 10, 10});
  buffer.image(10, 10, CV_8UC3).setTo(cv::Scalar::all(200));  // the thread's next image
  ASSERT_TRUE(cache.find(0));
  EXPECT_NE(cache.find(0)->image.data, in_buffer.data);
  EXPECT_EQ(cv::norm(cache.find(0)->image, cv::Mat(10, 10, CV_8UC3, cv::Scalar::all(7)), cv::NORM_INF), 0);
  const LoadedImage owned = image_of(10, 10, 5);
  cache.offer(1, owned);
  EXPECT_EQ(cache.find(1)->image.data, owned.image.data);
  cv::Mat big(10, 20, CV_8UC3, cv::Scalar::all(3));
  cache.offer(2, {big.colRange(0, 10), 10, 10});  // a view of part of an image
  EXPECT_NE(cache.find(2)->image.data, big.data);
  EXPECT_TRUE(cache.find(2)->image.isContinuous());
}

class ImageCachePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_image_cache_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(3);
    for (int i = 0; i < 6; ++i) {
      cv::Mat img(40 + 4 * i, 60, CV_8UC3);
      cv::randu(img, 0, 256);
      ImageRecord r{(dir_ / ("im" + std::to_string(i) + ".png")).string(), img.cols, img.rows, {{0, 0.5f, 0.5f, 0.3f, 0.3f}}};
      write_png(r.image_path, img);
      records_.push_back(r);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::shared_ptr<AugmentPipeline> pipeline() const {
    PipelineOptions o;
    o.img_size = 64;
    o.augment = true;
    return std::make_shared<AugmentPipeline>(records_, o);
  }
  fs::path dir_;
  std::vector<ImageRecord> records_;
};

// With room for every image each file is read once: after one pass the files can go, and the
// samples are those of a pipeline that decodes every time.
TEST_F(ImageCachePipelineTest, EachImageDecodesOnceWhileTheBudgetLasts) {
  auto plain = pipeline(), kept = pipeline();
  kept->keep_decoded_images(int64_t{1} << 30);
  std::vector<Sample> expected;
  for (int64_t i = 0; i < 6; ++i) {
    Generator g1 = sample_generator(2, 0, 0, i), g2 = sample_generator(2, 0, 0, i);
    expected.push_back(plain->get(i, g1));
    EXPECT_EQ(cv::norm(kept->get(i, g2).image, expected.back().image, cv::NORM_INF), 0);
  }
  for (int64_t i = 0; i < 6; ++i) kept->load(i);  // mosaics may have missed some
  EXPECT_EQ(kept->decoded_images()->images(), 6);
  EXPECT_NE(image_cache_line(*kept).find("Caching images as they load (0.0GB ram, budget 1.0GB"), std::string::npos)
      << image_cache_line(*kept);
  for (const ImageRecord& r : records_) fs::remove(r.image_path);
  for (int64_t i = 0; i < 6; ++i) {
    Generator g = sample_generator(2, 0, 0, i);
    const Sample s = kept->get(i, g);
    EXPECT_EQ(cv::norm(s.image, expected[i].image, cv::NORM_INF), 0) << i;
    EXPECT_EQ(s.labels, expected[i].labels);
  }
}

// A budget for the first two images keeps those two; the others are read from their files every time.
TEST_F(ImageCachePipelineTest, BeyondTheBudgetImagesAreReadEachTime) {
  auto p = pipeline();
  const int64_t two = static_cast<int64_t>((p->load(0).image.total() + p->load(1).image.total()) * 3);
  p->keep_decoded_images(two);
  for (int64_t i = 0; i < 6; ++i) p->load(i);
  EXPECT_EQ(p->decoded_images()->images(), 2);
  EXPECT_LE(p->decoded_images()->bytes(), two);
  EXPECT_NE(image_cache_line(*p).find("% of them fit, the rest decode each time"), std::string::npos) << image_cache_line(*p);
  for (const ImageRecord& r : records_) fs::remove(r.image_path);
  EXPECT_NO_THROW(p->load(0));
  try {
    p->load(5);
    FAIL() << "image 5 was not kept and its file is gone";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("im5.png"), std::string::npos) << e.what();
  }
}

}  // namespace

// --cache ram on a set larger than memory: the reference's check_cache_ram line, said before loading.
TEST(ImageCache, CacheRamShortfallIsSaidAsTheReference) {
  const int64_t gb = int64_t{1} << 30;
  EXPECT_EQ(cache_ram_shortfall_line("train: ", 123 * gb / 10, 45 * gb / 10, 156 * gb / 10),
            "train: 12.3GB RAM required, 4.5/15.6GB available, not caching images \u26a0\ufe0f");
  EXPECT_GT(total_memory_bytes(), 0);
  EXPECT_GE(total_memory_bytes(), available_memory_bytes());
}
