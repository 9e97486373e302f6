// The segmentation trainer (the Trainer over make_segment_task) on the CPU, on a tiny polygon
// dataset: the step's objective computes ComputeSegLoss exactly on a loader batch and a few steps
// on that batch lower it; a run interrupted mid-epoch and resumed ends bitwise where an
// uninterrupted one does (results.csv, model, EMA, optimizer).
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "engine/ops/elementwise.h"
#include "engine/tensor.h"
#include "tests/support/cli.h"
#include "tests/yolo/train/seg_dataset.h"
#include "tests/yolo/train/training_state.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/sampler.h"
#include "yolo/model/model_config.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/train/ema.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/seg_loss.h"
#include "yolo/train/train_step.h"
#include "yolo/train/train_task.h"
#include "yolo/train/trainer.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_segment_trainer_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

yolo::TrainOptions tiny(const fs::path& project, const fs::path& data) {
  yolo::TrainOptions o = yolo::train_defaults(yolo::TrainTaskKind::Segment);
  o.cfg = "models/yolov5n-seg.yaml";
  o.data = data.string();
  o.device = "cpu";
  o.img_size = 64;
  o.batch_size = 2;
  o.epochs = 3;
  o.workers = 1;
  o.noplots = true;
  o.no_tensorboard = true;
  o.project = project.string();
  return o;
}

}  // namespace

// The objective the trainer's step runs: its items are ComputeSegLoss's (box, seg, obj, cls) and
// its total the loss's, on the first batch of the task's own loader; then TrainStep on that batch
// repeated lowers the total.
TEST(SegmentTrainer, ObjectiveIsComputeSegLossAndStepsLowerIt) {
  const fs::path root = scratch("objective");
  const fs::path yaml = kestrel::testing::write_seg_dataset(root / "data", 4);
  const yolo::data::DatasetConfig config = yolo::data::load_dataset_config(yaml.string());
  const yolo::data::DatasetSplit split = yolo::data::load_split(config, "train", config.nc, false, false, 0, false, true);
  std::unique_ptr<yolo::TrainTask> task = yolo::make_segment_task(4, true);
  const yolo::ModelConfig mc = yolo::load_model_config("models/yolov5n-seg.yaml");
  std::shared_ptr<layers::Module> model = task->make_model(mc, config.nc, 0, {});
  model->train(true);
  yolo::data::PipelineOptions popt;
  popt.img_size = 64;
  popt.augment = false;  // letterboxed images: the batch is the same every epoch
  popt.batch_size = 4;
  task->make_pipeline(split.records, popt);
  yolo::data::LoaderOptions lopt;
  lopt.batch_size = 4;
  lopt.workers = 0;
  task->make_loader(lopt, yolo::data::distributed_order(yolo::data::DistributedSampler(4, 0, 1, false, 0)));
  task->start_epoch(0, 0);
  const std::optional<yolo::TaskBatch> b = task->next();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->masks.defined());
  const yolo::Hyp hyp = yolo::scale_loss_hyp(yolo::Hyp{}, 3, config.nc, 64);
  task->build_loss(hyp);
  const Tensor x = ops::mul(b->batch.images.to(DType::F32), 1.0 / 255);

  const yolo::StepLoss got = task->objective().forward(x, b->batch.targets, b->masks);
  yolo::ComputeSegLoss direct(task->head(), hyp, true);
  auto* seg = dynamic_cast<yolo::SegmentationModel*>(model.get());
  ASSERT_NE(seg, nullptr);
  const yolo::SegLossResult want = direct(seg->forward(x).raw, seg->forward(x).protos, b->batch.targets, b->masks);
  const std::vector<double> items = got.items.to_vector<double>();
  ASSERT_EQ(items.size(), 4u);
  EXPECT_DOUBLE_EQ(items[0], want.box);
  EXPECT_DOUBLE_EQ(items[1], want.seg);
  EXPECT_DOUBLE_EQ(items[2], want.obj);
  EXPECT_DOUBLE_EQ(items[3], want.cls);
  EXPECT_GT(want.seg, 0);
  const double total0 = got.total.to(DType::F64).item();
  EXPECT_DOUBLE_EQ(total0, want.total.to(DType::F64).item());
  const std::vector<double> comp = got.components.to_vector<double>();
  EXPECT_DOUBLE_EQ(comp[0] + comp[1] + comp[2], want.box + want.seg + want.obj + want.cls);

  yolo::Optimizer optimizer = yolo::smart_optimizer(*model, yolo::OptimizerKind::SGD, 0.01, 0.9, 0.0);
  yolo::GradScaler scaler(false);
  yolo::TrainStepParts parts;
  parts.objective = &task->objective();
  parts.optimizer = &optimizer;
  parts.scaler = &scaler;
  yolo::TrainStep step(parts, yolo::RankInfo{}, Device::cpu());
  std::vector<double> totals;
  for (int i = 0; i < 8; ++i) {
    step.run(x, b->batch.targets, i, /*step_now=*/true, false, b->masks);
    for (const yolo::BatchStatus& s : step.take_previous()) totals.push_back(s.box + s.seg + s.obj + s.cls);
  }
  for (const yolo::BatchStatus& s : step.drain()) {
    EXPECT_EQ(s.items, 4);
    totals.push_back(s.box + s.seg + s.obj + s.cls);
  }
  ASSERT_EQ(totals.size(), 8u);
  // The total is float32, the items float64: agreement to float32's rounding.
  EXPECT_NEAR(totals[0] * 4, total0, 1e-6 * total0) << "the first step's items are the loss's";
  EXPECT_LT(totals.back(), 0.9 * totals.front());
  fs::remove_all(root);
}

// Interrupted mid-epoch (as by SIGINT: exit 130) and resumed, the run ends where an uninterrupted
// one does: every results.csv row and the final epoch's full state (its --save-period copy).
TEST(SegmentTrainer, InterruptedAndResumedRunEqualsAnUninterruptedRun) {
  const fs::path root = scratch("resume");
  const fs::path data = kestrel::testing::write_seg_dataset(root / "data", 6);
  yolo::TrainOptions whole = tiny(root / "a", data);
  whole.save_period = 1;
  ASSERT_EQ(yolo::train(whole), 0);
  yolo::TrainOptions first = whole;
  first.project = (root / "b").string();
  first.interrupt_after = 4;  // epoch 1's batch 0
  ASSERT_EQ(yolo::train(first), 130);
  const fs::path last = root / "b/exp/weights/last.safetensors";
  ASSERT_TRUE(fs::exists(last));
  EXPECT_LT(kestrel::testing::read_results_csv(root / "b/exp/results.csv").size(), 3u);
  yolo::TrainOptions second = tiny(root / "b", data);
  second.resume = last.string();
  ASSERT_EQ(yolo::train(second), 0);
  kestrel::testing::expect_same_training_state(root / "a/exp/weights/epoch2.safetensors", root / "b/exp/weights/epoch2.safetensors");
  const auto rows = kestrel::testing::read_results_csv(root / "a/exp/results.csv");
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows, kestrel::testing::read_results_csv(root / "b/exp/results.csv"));

  // A detection run cannot resume it.
  yolo::TrainOptions detect;
  detect.resume = last.string();
  EXPECT_THROW(yolo::train(detect), Error);
  fs::remove_all(root);
}
