// The classification loader on a small synthetic image folder: every sample once per epoch, new
// orders per epoch, the batch cap, identical batches for 1 and 3 workers, DDP shares, --cache ram
// and disk (the .npy files, read back on later loads), a corrupt image named; and on coco128-cls
// (skipped where absent) the val split's first batch and two images' tensors against the
// reference's own transforms.
#include "yolo/data/classify_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "tests/support/testing.h"
#include "yolo/data/classify_transforms.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;
using kestrel::testing::error_of;

namespace {

const fs::path kCoco128Cls = "/work/shared/datasets/coco128-cls";

class ClassifyLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / (std::string("kestrel_classify_loader_") + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    // Eleven PNGs (lossless, so an .npy holds the decoded pixels exactly) of assorted shapes in
    // three classes.
    const int sizes[11][2] = {{64, 48}, {48, 64}, {80, 40}, {40, 80}, {64, 64}, {100, 60},
                              {30, 50}, {70, 70}, {90, 45}, {50, 100}, {33, 77}};
    std::mt19937 rng(42);
    for (int i = 0; i < 11; ++i) {
      const fs::path p = dir_ / "train" / std::string(1, static_cast<char>('a' + i % 3)) / ("im" + std::to_string(i) + ".png");
      fs::create_directories(p.parent_path());
      cv::Mat img(sizes[i][1], sizes[i][0], CV_8UC3);
      for (int y = 0; y < img.rows; ++y)
        for (int x = 0; x < img.cols * 3; ++x) img.ptr<uint8_t>(y)[x] = static_cast<uint8_t>(rng());
      write_png(p.string(), img);
    }
    train_ = scan_class_folders((dir_ / "train").string()).samples;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static ClassifyLoaderOptions options(bool augment, int workers) {
    ClassifyLoaderOptions o;
    o.size = 32;
    o.batch_size = 4;
    o.augment = augment;
    o.shuffle = augment;
    o.workers = workers;
    o.seed = 3;
    return o;
  }
  static std::vector<ClassifyBatch> epoch(ClassifyLoader& loader, int64_t e) {
    std::vector<ClassifyBatch> out;
    loader.start_epoch(e);
    while (std::optional<ClassifyBatch> b = loader.next()) out.push_back(std::move(*b));
    return out;
  }
  static ::testing::AssertionResult same_batches(const std::vector<ClassifyBatch>& a,
                                                 const std::vector<ClassifyBatch>& b) {
    if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " batches";
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].indices != b[i].indices || a[i].labels != b[i].labels)
        return ::testing::AssertionFailure() << "batch " << i << " holds other samples";
      if (a[i].images.shape() != b[i].images.shape() ||
          std::memcmp(a[i].images.data_ptr(), b[i].images.data_ptr(), a[i].images.numel() * 4) != 0)
        return ::testing::AssertionFailure() << "batch " << i << " has other pixels";
    }
    return ::testing::AssertionSuccess();
  }

  fs::path dir_;
  std::vector<ClassifySample> train_;
};

TEST_F(ClassifyLoaderTest, EveryEpochCoversTheDatasetOnceInANewOrder) {
  ClassifyLoader loader(train_, options(true, 2));
  EXPECT_EQ(loader.batch_size(), 4);
  EXPECT_EQ(loader.len(), 3);  // 4 + 4 + 3
  std::vector<std::vector<int>> orders;
  for (int64_t e = 0; e < 3; ++e) {
    const std::vector<ClassifyBatch> batches = epoch(loader, e);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches.back().size(), 3);
    std::vector<int> seen;
    for (const ClassifyBatch& b : batches) {
      EXPECT_EQ(b.images.shape(), (Shape{b.size(), 32, 32, 3}));
      EXPECT_EQ(b.images.dtype(), DType::F32);
      for (int64_t i = 0; i < b.size(); ++i) EXPECT_EQ(b.labels[i], train_[b.indices[i]].label);
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    }
    orders.push_back(seen);
    std::sort(seen.begin(), seen.end());
    std::vector<int> all(11);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all) << "epoch " << e;
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST_F(ClassifyLoaderTest, EvaluationKeepsTheDatasetOrderAndBatchesAreCapped) {
  ClassifyLoaderOptions o = options(false, 0);
  o.batch_size = 100;  // min(batch, dataset), as the reference
  ClassifyLoader loader(train_, o);
  EXPECT_EQ(loader.batch_size(), 11);
  EXPECT_EQ(loader.len(), 1);
  const std::vector<ClassifyBatch> batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 1u);
  std::vector<int> in_order(11);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(batches[0].indices, in_order);
  EXPECT_TRUE(std::is_sorted(batches[0].labels.begin(), batches[0].labels.end()));
  // Each image is the normalised centre crop of its file.
  std::vector<float> expected(32 * 32 * 3);
  normalize_imagenet(classify_eval(read_image(train_[5].path), 32), expected.data());
  EXPECT_EQ(std::memcmp(batches[0].images.data<float>() + 5 * expected.size(), expected.data(),
                        expected.size() * sizeof(float)),
            0);
}

TEST_F(ClassifyLoaderTest, WorkerCountDoesNotChangeTheBatches) {
  ClassifyLoader one(train_, options(true, 1)), three(train_, options(true, 3)), none(train_, options(true, 0));
  for (int64_t e = 0; e < 2; ++e) {
    const std::vector<ClassifyBatch> a = epoch(one, e);
    EXPECT_TRUE(same_batches(a, epoch(three, e))) << "epoch " << e;
    EXPECT_TRUE(same_batches(a, epoch(none, e))) << "epoch " << e;
  }
  // build_batch makes the same batch on the calling thread.
  EXPECT_TRUE(same_batches({one.build_batch(1, 2)}, {epoch(three, 1)[2]}));
  // Abandoning an epoch half-way leaves the next one whole.
  three.start_epoch(4);
  ASSERT_TRUE(three.next());
  EXPECT_TRUE(same_batches(epoch(three, 5), epoch(one, 5)));
}

TEST_F(ClassifyLoaderTest, DistributedSharesAreDisjointAndCoverTheDataset) {
  const int world = 3;  // 11 samples: 4 per rank, one repeated to pad to 12
  std::vector<std::vector<int64_t>> shares;
  for (int rank = 0; rank < world; ++rank) {
    ClassifyLoaderOptions o = options(true, 1);
    o.rank = rank;
    o.world = world;
    ClassifyLoader loader(train_, o);
    EXPECT_EQ(loader.samples_per_epoch(), 4);
    EXPECT_EQ(loader.len(), 1);
    shares.push_back(loader.epoch_indices(2));
    std::vector<int64_t> got;
    for (const ClassifyBatch& b : epoch(loader, 2)) got.insert(got.end(), b.indices.begin(), b.indices.end());
    EXPECT_EQ(got, shares.back());
  }
  // Interleaved (rank r at positions r, r + world, ...) they are one permutation padded by its start.
  std::vector<int64_t> total;
  for (int i = 0; i < 4; ++i)
    for (int r = 0; r < world; ++r) total.push_back(shares[r][i]);
  std::vector<int64_t> head(total.begin(), total.begin() + 11), sorted = head;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(11);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_EQ(total[11], total[0]);
}

TEST_F(ClassifyLoaderTest, RamAndDiskCachesGiveTheSameBatches) {
  ClassifyLoader plain(train_, options(true, 2));
  ClassifyLoaderOptions ram = options(true, 2), disk = options(true, 2);
  ram.cache = ClassifyCacheMode::Ram;
  disk.cache = ClassifyCacheMode::Disk;
  ClassifyLoader in_ram(train_, ram);
  const std::vector<ClassifyBatch> expected = epoch(plain, 0);
  EXPECT_TRUE(same_batches(expected, epoch(in_ram, 0)));
  EXPECT_TRUE(same_batches(epoch(plain, 1), epoch(in_ram, 1)));  // the second epoch from memory
  {
    ClassifyLoader on_disk(train_, disk);
    EXPECT_TRUE(same_batches(expected, epoch(on_disk, 0)));
  }
  for (const ClassifySample& s : train_) {
    const std::string npy = npy_path_of(s.path);
    ASSERT_TRUE(fs::exists(npy)) << npy;
    EXPECT_EQ(cv::norm(read_npy_image(npy), read_image(s.path), cv::NORM_INF), 0) << npy;
  }
  // Later loads read the .npy files, not the images: spoil the images and nothing changes.
  for (const ClassifySample& s : train_) std::ofstream(s.path, std::ios::trunc) << "not an image";
  ClassifyLoader again(train_, disk);
  EXPECT_TRUE(same_batches(expected, epoch(again, 0)));
}

TEST_F(ClassifyLoaderTest, ACorruptImageIsNamed) {
  std::ofstream(train_[6].path, std::ios::trunc) << "not an image";
  for (int workers : {0, 2}) {
    ClassifyLoader loader(train_, options(false, workers));
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next());
    const std::string e = error_of([&] { loader.next(); });
    EXPECT_NE(e.find(train_[6].path), std::string::npos) << e;
    EXPECT_NE(e.find("remove " + train_[6].path + " from the dataset"), std::string::npos) << e;
    EXPECT_FALSE(loader.next());  // the epoch ends
  }
}

TEST(ClassifyLoaderCoco128Cls, ValFirstBatchInClassOrder) {
  if (!fs::is_directory(kCoco128Cls)) GTEST_SKIP() << kCoco128Cls << " absent";
  const ClassifyDataset d = load_classify_dataset(kCoco128Cls.string());
  EXPECT_EQ(d.test_name, "val");
  ASSERT_EQ(d.classes.size(), 10u);
  EXPECT_EQ(d.train.samples.size(), 140u);
  EXPECT_EQ(d.test.samples.size(), 40u);
  ClassifyLoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  ClassifyLoader loader(d.test.samples, o);
  EXPECT_EQ(loader.len(), 3);
  loader.start_epoch(0);
  const std::optional<ClassifyBatch> b = loader.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->images.shape(), (Shape{16, 224, 224, 3}));
  // torchvision's ImageFolder on val: bowl 4, carrot 3, chair 4, cup 3, then donut.
  EXPECT_EQ(b->labels, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4}));
}

// Recorded with the reference's own evaluation transform (utils/augmentations.py CenterCrop(224),
// ToTensor, T.Normalize(IMAGENET_MEAN, IMAGENET_STD)) in /opt/kestrel-bench/bin/python (OpenCV
// 5.0.0, torch 2.15) on cv2.imread of the first two images of torchvision's ImageFolder on
// coco128-cls/val: the float64 sum of the (3, 224, 224) tensor, and the values at (c, 0, 0),
// (c, 111, 57) and (c, 223, 223).
TEST(ClassifyLoaderCoco128Cls, ValTensorsMatchTheReferenceTransforms) {
  if (!fs::is_directory(kCoco128Cls)) GTEST_SKIP() << kCoco128Cls << " absent";
  struct Recorded {
    const char* file;
    double sum;
    float at[3][3];  // [position][channel]: (0, 0), (111, 57), (223, 223)
  };
  const Recorded recorded[2] = {
      {"val/bowl/000000000196_10.jpg", -133814.78017049748,
       {{-1.0732940435409546f, -1.422969102859497f, -1.7695860862731934f},
        {-0.5253018736839294f, -0.17997196316719055f, -0.6018299460411072f},
        {1.1529240608215332f, 0.9929972290992737f, 1.2108062505722046f}}},
      {"val/bowl/000000000196_14.jpg", -97342.31831161957,
       {{-2.032280206680298f, -2.0357141494750977f, -1.804444432258606f},
        {1.033050775527954f, -0.2499999701976776f, -1.6998692750930786f},
        {0.9303022623062134f, -0.09243695437908173f, -0.6541175246238708f}}}};
  const ClassifyDataset d = load_classify_dataset(kCoco128Cls.string());
  ClassifyLoaderOptions o;
  o.batch_size = 2;
  ClassifyLoader loader(d.test.samples, o);
  const ClassifyBatch b = loader.build_batch(0, 0);
  const int positions[3][2] = {{0, 0}, {111, 57}, {223, 223}};
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(d.test.samples[i].path, (kCoco128Cls / recorded[i].file).string());
    const float* image = b.images.data<float>() + static_cast<int64_t>(i) * 224 * 224 * 3;
    double sum = 0;
    for (int64_t k = 0; k < 224 * 224 * 3; ++k) sum += image[k];
    // Same decoder output and resize: the sum agrees to float32 rounding of 150528 terms.
    EXPECT_NEAR(sum, recorded[i].sum, 1e-6 * std::abs(recorded[i].sum)) << recorded[i].file;
    for (int p = 0; p < 3; ++p)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(image[(positions[p][0] * 224 + positions[p][1]) * 3 + c], recorded[i].at[p][c])
            << recorded[i].file << " at " << positions[p][0] << "," << positions[p][1] << " channel " << c;
  }
}

}  // namespace
