#include "yolo/data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "base/error.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/quad_collate.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("kestrel_loader_") + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // Ten images of assorted shapes with random pixels and one to three boxes each.
    const int sizes[10][2] = {{64, 48}, {48, 64}, {80, 40}, {40, 80}, {64, 64},
                              {100, 60}, {30, 50}, {70, 70}, {90, 45}, {50, 100}};
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(0.2f, 0.8f);
    for (int i = 0; i < 10; ++i) {
      const int w = sizes[i][0], h = sizes[i][1];
      cv::Mat img(h, w, CV_8UC3);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w * 3; ++x) img.ptr<uchar>(y)[x] = static_cast<uchar>(rng());
      ImageRecord r{(dir_ / ("im" + std::to_string(i) + ".png")).string(), w, h, {}};
      write_png(r.image_path, img);
      for (int k = 0; k <= i % 3; ++k) r.boxes.push_back({i % 4, u(rng), u(rng), 0.3f, 0.3f});
      records_.push_back(r);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::shared_ptr<AugmentPipeline> pipeline(bool augment, bool rect = false, int img_size = 64,
                                            double pad = 0.0, int batch_size = 4) const {
    PipelineOptions o;
    o.img_size = img_size;
    o.augment = augment;
    o.rect = rect;
    o.pad = pad;
    o.batch_size = batch_size;
    o.hyp.mixup = 0.5;  // exercise the second mosaic too
    o.hyp.flipud = 0.5;
    return std::make_shared<AugmentPipeline>(records_, o);
  }

  fs::path dir_;
  std::vector<ImageRecord> records_;
};

// An order that changes with the epoch, like a shuffling sampler's (with repeats, as padding).
EpochOrder shuffled_order(int64_t n, int64_t samples) {
  return {samples, [n, samples](int64_t epoch) {
            std::mt19937 rng(static_cast<unsigned>(1000 + epoch));
            std::vector<int64_t> order(samples);
            for (int64_t i = 0; i < samples; ++i) order[i] = i % n;
            std::shuffle(order.begin(), order.end(), rng);
            return order;
          },
          {}};
}

std::vector<Batch> drain(Loader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<Batch> out;
  while (std::optional<Batch> b = loader.next()) out.push_back(std::move(*b));
  return out;
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.index == b.index && a.paths == b.paths && a.images.shape() == b.images.shape() &&
         a.targets.shape() == b.targets.shape() &&
         std::memcmp(a.images.data_ptr(), b.images.data_ptr(), a.images.numel()) == 0 &&
         a.targets.to_vector<float>() == b.targets.to_vector<float>();
}

TEST_F(LoaderTest, LetterboxSampleByHand) {
  // 40 x 20, all blue (BGR 255, 0, 0), one centred box of half the size.
  const std::string file = (dir_ / "blue.png").string();
  write_png(file, cv::Mat(20, 40, CV_8UC3, cv::Scalar(255, 0, 0)));
  PipelineOptions o;
  o.img_size = 32;
  AugmentPipeline p({{file, 40, 20, {{7, 0.5f, 0.5f, 0.5f, 0.5f}}}}, o);
  Generator gen = sample_generator(0, 0, 0, 0);
  const Sample s = p.get(0, gen);
  // load_image: r = 0.8 -> 32 x 16; letterbox to 32 x 32: 8 rows of padding above and below.
  ASSERT_EQ(s.image.cols, 32);
  ASSERT_EQ(s.image.rows, 32);
  EXPECT_EQ(s.image.at<cv::Vec3b>(7, 0), cv::Vec3b(114, 114, 114));
  EXPECT_EQ(s.image.at<cv::Vec3b>(8, 0), cv::Vec3b(0, 0, 255));  // RGB now
  EXPECT_EQ(s.image.at<cv::Vec3b>(23, 31), cv::Vec3b(0, 0, 255));
  EXPECT_EQ(s.image.at<cv::Vec3b>(24, 31), cv::Vec3b(114, 114, 114));
  // Box: x 8..24, y 4 + 8 = 12 .. 20 of 32 x 32.
  ASSERT_EQ(s.labels.size(), 1u);
  EXPECT_EQ(s.labels[0].cls, 7);
  EXPECT_NEAR(s.labels[0].x, 0.5, 1e-6);
  EXPECT_NEAR(s.labels[0].y, 0.5, 1e-6);
  EXPECT_NEAR(s.labels[0].w, 0.5, 1e-6);
  EXPECT_NEAR(s.labels[0].h, 0.25, 1e-6);
  ASSERT_TRUE(s.has_shapes);
  EXPECT_EQ(s.shapes.h0, 20);
  EXPECT_EQ(s.shapes.w0, 40);
  EXPECT_DOUBLE_EQ(s.shapes.ratio_h, 0.8);
  EXPECT_DOUBLE_EQ(s.shapes.pad_w, 0);
  EXPECT_DOUBLE_EQ(s.shapes.pad_h, 8);
}

TEST_F(LoaderTest, MosaicSamplesAreReproducibleAndValid) {
  auto p = pipeline(true);
  for (int64_t i = 0; i < 10; ++i) {
    Generator g1 = sample_generator(5, 0, 2, i), g2 = sample_generator(5, 0, 2, i);
    const Sample a = p->get(i, g1), b = p->get(i, g2);
    ASSERT_EQ(a.image.cols, 64);
    ASSERT_EQ(a.image.rows, 64);
    EXPECT_FALSE(a.has_shapes);
    EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0);
    ASSERT_EQ(a.labels.size(), b.labels.size());
    for (size_t k = 0; k < a.labels.size(); ++k) {
      EXPECT_EQ(a.labels[k], b.labels[k]);
      const LabelBox& l = a.labels[k];
      EXPECT_TRUE(l.x >= 0 && l.x <= 1 && l.y >= 0 && l.y <= 1 && l.w > 0 && l.h > 0);
    }
  }
  // Another epoch or rank draws another sample.
  Generator e0 = sample_generator(5, 0, 0, 3), e1 = sample_generator(5, 0, 1, 3);
  Generator r1 = sample_generator(5, 1, 0, 3);
  const Sample s0 = p->get(3, e0), s1 = p->get(3, e1), s2 = p->get(3, r1);
  EXPECT_NE(cv::norm(s0.image, s1.image, cv::NORM_INF), 0);
  EXPECT_NE(cv::norm(s0.image, s2.image, cv::NORM_INF), 0);
}

TEST_F(LoaderTest, RamCacheServesTheSameSamplesWithoutTheFiles) {
  auto plain = pipeline(true);
  auto cached = pipeline(true);
  EXPECT_GT(cached->cache_bytes(), 0);
  ASSERT_TRUE(cached->cache_images(2));
  EXPECT_TRUE(cached->cached());
  std::vector<Sample> expected;
  for (int64_t i = 0; i < 10; ++i) {
    Generator g = sample_generator(1, 0, 0, i);
    expected.push_back(plain->get(i, g));
  }
  for (const ImageRecord& r : records_) fs::remove(r.image_path);
  for (int64_t i = 0; i < 10; ++i) {
    Generator g = sample_generator(1, 0, 0, i);
    const Sample s = cached->get(i, g);
    EXPECT_EQ(cv::norm(s.image, expected[i].image, cv::NORM_INF), 0) << i;
    EXPECT_EQ(s.labels, expected[i].labels);
  }
  Generator g = sample_generator(1, 0, 0, 0);
  EXPECT_THROW(plain->get(0, g), Error);  // the files really are gone
}

TEST_F(LoaderTest, BatchesComeInOrderWithTargets) {
  auto p = pipeline(false);
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  Loader loader(p, o, sequential_order(p->size()));
  EXPECT_EQ(loader.len(), 3);
  const std::vector<Batch> batches = drain(loader, 0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].images.shape(), (Shape{2, 64, 64, 3}));
  int64_t image = 0;
  for (const Batch& b : batches) {
    EXPECT_EQ(b.images.dtype(), DType::U8);
    EXPECT_EQ(b.images.is_pinned(), cuda_available());
    const std::vector<float> t = b.targets.to_vector<float>();
    size_t row = 0;
    for (int64_t i = 0; i < b.size(); ++i, ++image) {
      EXPECT_EQ(b.paths[i], records_[image].image_path);
      Generator g = sample_generator(o.seed, 0, 0, image);
      const Sample s = p->get(image, g);
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(b.images.data_ptr()) + i * 64 * 64 * 3,
                            s.image.data, 64 * 64 * 3),
                0);
      ASSERT_TRUE(b.shapes[i].has_value());
      EXPECT_EQ(b.shapes[i]->w0, records_[image].width);
      for (const LabelBox& l : s.labels) {
        ASSERT_LT(row * 6 + 5, t.size());
        EXPECT_EQ(t[row * 6], static_cast<float>(i));
        EXPECT_EQ(t[row * 6 + 1], static_cast<float>(l.cls));
        EXPECT_EQ(t[row * 6 + 2], l.x);
        EXPECT_EQ(t[row * 6 + 5], l.h);
        ++row;
      }
    }
    EXPECT_EQ(row * 6, t.size());
  }
  EXPECT_FALSE(loader.next().has_value());
}

TEST_F(LoaderTest, IdenticalBatchesWhateverTheWorkerCount) {
  auto p = pipeline(true);
  const EpochOrder order = shuffled_order(p->size(), 14);
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 9;
  std::vector<std::vector<Batch>> runs;
  for (int workers : {1, 3, 0}) {
    o.workers = workers;
    Loader loader(p, o, order);
    std::vector<Batch> all = drain(loader, 0);
    for (Batch& b : drain(loader, 1)) all.push_back(std::move(b));
    runs.push_back(std::move(all));
  }
  ASSERT_EQ(runs[0].size(), 8u);
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t b = 0; b < runs[0].size(); ++b)
      EXPECT_TRUE(same_batch(runs[0][b], runs[r][b])) << "run " << r << " batch " << b;
  // The same as building a batch alone, and epochs differ.
  o.workers = 0;
  Loader single(p, o, order);
  EXPECT_TRUE(same_batch(single.build_batch(1, 2), runs[0][6]));
  EXPECT_FALSE(same_batch(runs[0][0], runs[0][4]));
  // Another rank draws other augmentations for the same indices.
  o.rank = 1;
  Loader other_rank(p, o, order);
  EXPECT_FALSE(same_batch(other_rank.build_batch(0, 0), runs[0][0]));
}

// Worker threads decode into buffers they keep (LoadBuffers): every batch equals one built with
// fresh memory (build_batch), mosaics with mixup and letterboxed rect batches, with the decoded-
// image cache off, on for part of the dataset (its kept images are copies of the buffers), or
// holding everything.
TEST_F(LoaderTest, ReusedDecodeBuffersGiveTheSameBatchesAsFreshMemory) {
  for (int64_t budget : {int64_t{0}, int64_t{3 * 64 * 64 * 3}, int64_t{1} << 30}) {
    for (bool augment : {true, false}) {
      auto p = pipeline(augment, /*rect=*/!augment, 64, 0.5);
      p->keep_decoded_images(budget);
      const EpochOrder order = augment ? shuffled_order(p->size(), 14) : sequential_order(p->size());
      LoaderOptions o;
      o.batch_size = 4;
      o.seed = 3;
      for (int workers : {0, 2}) {
        o.workers = workers;
        Loader loader(p, o, order);
        for (int64_t epoch : {0, 1}) {
          const std::vector<Batch> got = drain(loader, epoch);
          ASSERT_EQ(static_cast<int64_t>(got.size()), loader.len());
          for (const Batch& b : got)
            EXPECT_TRUE(same_batch(b, loader.build_batch(epoch, b.index)))
                << "budget " << budget << " augment " << augment << " workers " << workers
                << " epoch " << epoch << " batch " << b.index;
        }
      }
    }
  }
}

TEST_F(LoaderTest, WorkerErrorReachesTheConsumerNamingTheFile) {
  std::vector<ImageRecord> records = records_;
  const std::string bad = (dir_ / "broken.jpg").string();
  std::ofstream(bad) << "not an image";
  records[6].image_path = bad;
  PipelineOptions po;
  po.img_size = 64;
  auto p = std::make_shared<AugmentPipeline>(records, po);
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 3;
  Loader loader(p, o, sequential_order(p->size()));
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.start_epoch(epoch);
    for (int b = 0; b < 3; ++b) ASSERT_TRUE(loader.next().has_value()) << b;
    try {
      loader.next();
      FAIL() << "the broken image went unnoticed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
    EXPECT_FALSE(loader.next().has_value());  // the epoch is over
  }
}

TEST_F(LoaderTest, StopsCleanlyMidEpoch) {
  auto p = pipeline(true);
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 3;
  o.prefetch = 2;
  const EpochOrder order = shuffled_order(p->size(), 400);
  {
    Loader loader(p, o, order);
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    loader.start_epoch(1);  // abandons epoch 0 mid-way
    const std::optional<Batch> first = loader.next();
    ASSERT_TRUE(first.has_value());
    EXPECT_TRUE(same_batch(*first, loader.build_batch(1, 0)));
    ASSERT_TRUE(loader.next().has_value());
  }  // destroyed with ~100 batches left: must join promptly
  {
    Loader never_started(p, o, order);
  }
}

TEST_F(LoaderTest, DistributedRanksShareTheDataset) {
  auto p = pipeline(false);
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 2;
  std::vector<std::string> seen;
  for (int rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    Loader loader(p, o, distributed_order(DistributedSampler(p->size(), rank, 2, true, 3)));
    EXPECT_EQ(loader.len(), 3);  // 5 samples per rank
    for (const Batch& b : drain(loader, 4)) seen.insert(seen.end(), b.paths.begin(), b.paths.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::string> all;
  for (const ImageRecord& r : records_) all.push_back(r.image_path);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(seen, all);  // disjoint and covering: every image exactly once
}

TEST_F(LoaderTest, RectBatchesTakeTheirShapes) {
  auto p = pipeline(false, /*rect=*/true, 64, /*pad=*/0.5, /*batch_size=*/4);
  ASSERT_EQ(p->batch_shapes().size(), 3u);
  // Sorted by aspect ratio h / w.
  for (int64_t i = 1; i < p->size(); ++i)
    EXPECT_LE(double(p->record(i - 1).height) / p->record(i - 1).width,
              double(p->record(i).height) / p->record(i).width);
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  Loader loader(p, o, sequential_order(p->size()));
  const std::vector<Batch> batches = drain(loader, 0);
  ASSERT_EQ(batches.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(batches[b].images.size(1), p->batch_shapes()[b][0]) << b;
    EXPECT_EQ(batches[b].images.size(2), p->batch_shapes()[b][1]) << b;
  }
  // A shuffled order mixes shapes within a batch: refused with the files named.
  Loader shuffled(p, o, shuffled_order(p->size(), 10));
  shuffled.start_epoch(0);
  EXPECT_THROW(
      {
        while (shuffled.next()) {
        }
      },
      Error);
}

}  // namespace

// --quad: batches of 4k images come out as k images at twice the size, each from the collate of
// that batch's own stream; a last batch of fewer than 4 images is dropped, and a batch size that is
// no multiple of 4 refused.
TEST_F(LoaderTest, QuadBatchesAreQuarteredAtTwiceTheSize) {
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.seed = 3;
  o.quad = true;
  o.pin_memory = false;
  Loader loader(pipeline(true), o, sequential_order(10));
  EXPECT_EQ(loader.len(), 2);  // 4 + 4, and 2 left over
  const std::vector<Batch> batches = drain(loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  LoaderOptions plain_options = o;
  plain_options.quad = false;
  plain_options.workers = 0;
  Loader plain(pipeline(true), plain_options, sequential_order(10));
  EXPECT_EQ(plain.len(), 3);
  for (const Batch& b : batches) {
    EXPECT_EQ(b.images.shape(), (Shape{1, 128, 128, 3}));
    Batch four = plain.build_batch(0, b.index);
    Generator gen = quad_generator(3, 0, 0, b.index);
    const Batch want = quad_collate(four, gen, false);
    EXPECT_TRUE(kestrel::testing::all_close(b.images, want.images, 0, 0)) << b.index;
    EXPECT_TRUE(kestrel::testing::all_close(b.targets, want.targets, 0, 0)) << b.index;
  }
  o.batch_size = 6;
  EXPECT_NE(kestrel::testing::error_of([&] { Loader l(pipeline(true), o, sequential_order(10)); }).find("multiple of 4"),
            std::string::npos);
}

namespace {

// The reference's count: min(cores / local ranks, batch (0 when 1), --workers), with the batch
// capped by the dataset's size.
TEST(DataloaderWorkers, AreTheSmallestOfCoresBatchAndFlag) {
  EXPECT_EQ(dataloader_workers(16, 1, 16, 1000, 8), 8);   // --workers
  EXPECT_EQ(dataloader_workers(16, 4, 16, 1000, 8), 4);   // cores per local rank
  EXPECT_EQ(dataloader_workers(2, 1, 16, 1000, 8), 2);    // cores
  EXPECT_EQ(dataloader_workers(16, 1, 3, 1000, 8), 3);    // batch
  EXPECT_EQ(dataloader_workers(16, 1, 16, 5, 8), 5);      // batch capped by the dataset
  EXPECT_EQ(dataloader_workers(16, 1, 1, 1000, 8), 0);    // batch 1: the consumer's thread
  EXPECT_EQ(dataloader_workers(16, 1, 16, 1, 8), 0);      // a one-image dataset, likewise
  EXPECT_EQ(dataloader_workers(16, 1, 16, 1000, 0), 0);   // --workers 0
  EXPECT_EQ(dataloader_workers(3, 4, 16, 1000, 8), 0);    // fewer cores than ranks
}

}  // namespace
