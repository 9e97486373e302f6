// run_target_rows: the one target row count of a graphed multi-process run bounds every batch a
// rank can draw (mosaic of 4 images with replacement, 8 with mixup, 1 without mosaic or with
// --rect) and is the same for every rank that sees the same records.
#include <gtest/gtest.h>

#include "yolo/train/batch_prep.h"
#include "yolo/train/loss.h"

namespace kestrel::yolo {
namespace {

std::vector<data::ImageRecord> records_with(std::initializer_list<int> label_counts) {
  std::vector<data::ImageRecord> out;
  for (int n : label_counts) {
    data::ImageRecord r;
    r.image_path = "img" + std::to_string(out.size()) + ".jpg";
    r.boxes.resize(n, data::LabelBox{0, 0.5f, 0.5f, 0.1f, 0.1f});
    out.push_back(r);
  }
  return out;
}

TEST(RunTargetRows, BoundsTheDensestBatchARankCanDraw) {
  const auto records = records_with({3, 0, 17, 5});
  Hyp hyp;  // the scratch defaults: mosaic 1.0, mixup 0.0
  hyp.mosaic = 1.0;
  hyp.mixup = 0.0;
  // 8 samples, each a mosaic of 4 tiles that may all be the 17-label image.
  EXPECT_EQ(run_target_rows(records, 8, hyp, false), padded_target_rows(8 * 4 * 17));
  hyp.mixup = 0.1;  // a second mosaic blended in: 8 tiles
  EXPECT_EQ(run_target_rows(records, 8, hyp, false), padded_target_rows(8 * 8 * 17));
  hyp.mosaic = 0.0;  // one image a sample
  EXPECT_EQ(run_target_rows(records, 8, hyp, false), padded_target_rows(8 * 17));
  hyp.mosaic = 1.0;  // --rect loads single images
  EXPECT_EQ(run_target_rows(records, 8, hyp, true), padded_target_rows(8 * 17));
}

TEST(RunTargetRows, NoLabelsStillGivesTheSmallestPadding) {
  EXPECT_EQ(run_target_rows(records_with({0, 0}), 16, Hyp{}, false), padded_target_rows(0));
  EXPECT_EQ(run_target_rows({}, 16, Hyp{}, false), padded_target_rows(0));
}

TEST(RunTargetRows, DependsOnTheRecordsNotTheirOrder) {
  Hyp hyp;
  EXPECT_EQ(run_target_rows(records_with({1, 40, 2}), 4, hyp, false),
            run_target_rows(records_with({40, 2, 1}), 4, hyp, false));
}

TEST(PadBatchTargets, RunWideRowsOrTheFewFixedCounts) {
  const Tensor t = Tensor::zeros({70, 6});
  EXPECT_EQ(pad_batch_targets(t, 0, 3).size(0), padded_target_rows(70));
  EXPECT_EQ(pad_batch_targets(t, 512, 3).size(0), 512);
  EXPECT_THROW(pad_batch_targets(t, 64, 3), Error);  // more labels than the run was sized for
}

}  // namespace
}  // namespace kestrel::yolo
