// BatchPrep: the one path from a loader batch to the step's inputs (labels checked on the host,
// --multi-scale's resize, padding on a GPU, upload, input scaling), on the CPU; and
// multi_scale_size's range and reproducibility.
#include "yolo/train/batch_prep.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/error.h"
#include "engine/random.h"
#include "layers/detect.h"

namespace kestrel::yolo {
namespace {

std::shared_ptr<layers::Detect> detect_with(int64_t nc) {
  Generator gen(3);
  auto d = std::make_shared<layers::Detect>(nc, std::vector<std::vector<double>>{{10, 13, 16, 30, 33, 23}},
                                            std::vector<int64_t>{4}, gen);
  d->set_strides({8.0});
  return d;
}

data::Batch batch_of(int64_t n, int64_t side, const std::vector<float>& rows) {
  data::Batch b;
  std::vector<uint8_t> pixels(static_cast<size_t>(n * side * side * 3));
  for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>(k % 2 ? 255 : 0);
  b.images = Tensor::from_vector(pixels, {n, side, side, 3});
  b.targets = Tensor::from_vector(rows, {static_cast<int64_t>(rows.size() / 6), 6});
  for (int64_t i = 0; i < n; ++i) b.paths.push_back("img" + std::to_string(i) + ".jpg");
  b.shapes.resize(static_cast<size_t>(n));
  return b;
}

TEST(BatchPrep, ScalesTheImagesAndKeepsTheTargetsOnTheCpu) {
  const auto detect = detect_with(2);
  const ComputeLoss loss(*detect, Hyp{});
  BatchPrep prep(loss, Device::cpu(), DType::F32, BatchPrepOptions{});
  const std::vector<float> rows = {0, 1, 0.5f, 0.5f, 0.2f, 0.2f, 1, 0, 0.3f, 0.3f, 0.1f, 0.1f};
  const StepInputs in = prep.prepare(batch_of(2, 32, rows), 0, 0, 0);
  EXPECT_EQ(in.input.shape(), (Shape{2, 32, 32, 3}));
  EXPECT_EQ(in.input.dtype(), DType::F32);
  const std::vector<float> x = in.input.contiguous().to_vector<float>();
  EXPECT_FLOAT_EQ(x[0], 0.0f);
  EXPECT_FLOAT_EQ(x[1], 1.0f);
  EXPECT_EQ(in.targets.to_vector<float>(), rows);  // no padding on the CPU
}

TEST(BatchPrep, RefusesABadLabelBeforeTheUpload) {
  const auto detect = detect_with(2);
  const ComputeLoss loss(*detect, Hyp{});
  BatchPrep prep(loss, Device::cpu(), DType::F32, BatchPrepOptions{});
  // Class 5 of a 2-class model.
  try {
    prep.prepare(batch_of(1, 32, {0, 5, 0.5f, 0.5f, 0.2f, 0.2f}), 0, 0, 0);
    FAIL() << "class 5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target row 0"), std::string::npos) << e.what();
  }
}

TEST(BatchPrep, MultiScaleResizesEachBatchToItsDrawnSize) {
  const auto detect = detect_with(2);
  const ComputeLoss loss(*detect, Hyp{});
  BatchPrepOptions o;
  o.multi_scale = true;
  o.seed = 7;
  o.img_size = 64;
  o.stride = 32;
  BatchPrep prep(loss, Device::cpu(), DType::F32, o);
  const std::vector<float> rows = {0, 1, 0.5f, 0.5f, 0.2f, 0.2f};
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t size = multi_scale_size(7, 0, 3, i, 64, 32);
    const StepInputs in = prep.prepare(batch_of(1, 64, rows), 3, i, i);
    EXPECT_EQ(in.input.shape(), (Shape{1, size, size, 3})) << "batch " << i;
    EXPECT_EQ(in.targets.to_vector<float>(), rows);  // normalised boxes stay
  }
}

TEST(MultiScaleSize, StaysInTheReferenceRangeOnTheStrideAndRepeats) {
  std::set<int64_t> seen;
  for (int64_t b = 0; b < 200; ++b) {
    const int64_t s = multi_scale_size(1, 0, 2, b, 640, 32);
    EXPECT_GE(s, 320);
    EXPECT_LT(s, 640 * 3 / 2 + 32);
    EXPECT_EQ(s % 32, 0);
    EXPECT_EQ(s, multi_scale_size(1, 0, 2, b, 640, 32));  // a resumed run draws the same
    seen.insert(s);
  }
  EXPECT_GT(seen.size(), 10u);
  EXPECT_NE(multi_scale_size(1, 0, 2, 0, 640, 32) + multi_scale_size(1, 0, 2, 1, 640, 32) +
                multi_scale_size(1, 0, 2, 2, 640, 32),
            multi_scale_size(1, 1, 2, 0, 640, 32) + multi_scale_size(1, 1, 2, 1, 640, 32) +
                multi_scale_size(1, 1, 2, 2, 640, 32));  // each rank its own stream
}

}  // namespace
}  // namespace kestrel::yolo
