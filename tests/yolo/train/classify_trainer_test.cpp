// The classifier's trainer (yolo/train/classify_trainer) called directly: a run stopped by a
// signal inside its second epoch, resumed there (--resume, the newest last.safetensors under the
// project), stopped again at that epoch's end and resumed again, ends bitwise where an
// uninterrupted run ends, dropout's random stream included: the final losses to the last bit,
// every tensor of the stripped last.safetensors, every results.csv row; the resumed runs continue
// in their own directory. A finished run is not resumable, and a detection
// checkpoint is refused by --resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "tests/yolo/cli/classify_folder.h"
#include "tests/yolo/train/training_state.h"
#include "yolo/common/stop_signal.h"
#include "yolo/train/classify_trainer.h"

namespace fs = std::filesystem;
using namespace kestrel;

namespace {

class ClassifyTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_classify_trainer_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    kestrel::testing::make_classify_folder(dir_ / "data", {"a", "b", "c"}, 8, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  yolo::ClassifyTrainOptions options(const std::string& project) const {
    yolo::ClassifyTrainOptions o;
    o.model = "yolov5n.yaml";
    o.data = (dir_ / "data").string();
    o.imgsz = 32;
    o.batch_size = 8;  // 24 images: 3 batches an epoch
    o.epochs = 3;
    o.device = "cpu";
    o.workers = 1;
    o.dropout = 0.2;  // a random stream the checkpoint must carry
    o.noplots = true;
    o.project = (dir_ / project).string();
    return o;
  }

  fs::path dir_;
};

TEST_F(ClassifyTrainer, StoppedAndResumedRunEqualsAnUninterruptedRun) {
  yolo::ClassifyTrainResults whole, resumed;
  ASSERT_EQ(yolo::train_classifier(options("a"), &whole), 0);

  yolo::ClassifyTrainOptions first = options("b");
  first.interrupt_after = 4;  // epoch 1's first batch: stopped inside epoch 1, before its batch 1
  try {
    yolo::train_classifier(first);
    FAIL() << "the run was not stopped";
  } catch (const yolo::Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGINT);
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
  const fs::path b = dir_ / "b" / "exp";
  EXPECT_EQ(kestrel::testing::read_results_csv(b / "results.csv").size(), 1u) << "the stopped epoch has no row yet";
  EXPECT_TRUE(fs::exists(b / "weights" / "last.prev.safetensors")) << "the checkpoint before last is kept while the run lasts";
  yolo::ClassifyTrainOptions again = options("b");
  again.epochs = 1;        // the checkpoint's options win
  again.batch_size = 4;
  again.resume = "";       // the newest last.safetensors under the project
  again.interrupt_after = 2;  // epoch 1's last batch: this stop waits for the epoch's end
  EXPECT_THROW(yolo::train_classifier(again), yolo::Interrupted);
  EXPECT_EQ(kestrel::testing::read_results_csv(b / "results.csv").size(), 2u) << "epoch 1 ended before the stop";
  again.interrupt_after = 0;
  ASSERT_EQ(yolo::train_classifier(again, &resumed), 0);
  EXPECT_FALSE(fs::exists(dir_ / "b" / "exp2")) << "a resumed run continues in its own directory";
  EXPECT_FALSE(fs::exists(b / "weights" / "last.prev.safetensors")) << "removed when the run ends";

  EXPECT_EQ(whole.train_loss, resumed.train_loss);
  EXPECT_EQ(whole.val_loss, resumed.val_loss);
  EXPECT_EQ(whole.top1, resumed.top1);
  const fs::path a = dir_ / "a" / "exp";
  kestrel::testing::expect_same_tensors(a / "weights" / "last.safetensors", b / "weights" / "last.safetensors");
  const auto rows = kestrel::testing::read_results_csv(a / "results.csv");
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows, kestrel::testing::read_results_csv(b / "results.csv"));
  const SafetensorsFile stripped = load_safetensors((b / "weights" / "last.safetensors").string());
  EXPECT_EQ(stripped.metadata().at("stripped"), "true");
  for (const std::string& name : stripped.names()) EXPECT_EQ(name.rfind("model.", 0), 0u) << name;

  // Finished: stripped, nothing to resume.
  yolo::ClassifyTrainOptions done = options("b");
  done.resume = (b / "weights" / "last.safetensors").string();
  EXPECT_THROW(yolo::train_classifier(done), Error);
}

TEST_F(ClassifyTrainer, ResumeRefusesWhatIsNoClassifierCheckpoint) {
  yolo::ClassifyTrainOptions o = options("c");
  o.resume = "";  // nothing under the project yet
  EXPECT_THROW(yolo::train_classifier(o), Error);
  o.resume = "tests/data/tiny_train.pt";  // a detection run's checkpoint
  ASSERT_TRUE(fs::exists(*o.resume));
  EXPECT_NE(kestrel::testing::error_of([&] { yolo::train_classifier(o); }).find("not a classifier's training checkpoint"),
            std::string::npos);
}

}  // namespace
