// The interruption and resume guarantees on a GPU with bf16 autocast: a run interrupted mid-epoch
// (as by SIGINT, exit 130) and resumed ends with the same model, EMA and optimizer state and the
// same results.csv as an uninterrupted run. Bitwise, as on the CPU: Kestrel's CUDA kernels reduce
// without float atomics and the convolution picks only deterministic cuDNN algorithms. (The pick
// is timed per process; should two processes pick different ones, this test is where it shows.)
// Skipped without a CUDA device.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/testing.h"
#include "tests/yolo/train/training_state.h"
#include "yolo/train/trainer.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

yolo::TrainOptions tiny_gpu(const fs::path& project) {
  yolo::TrainOptions o;
  o.cfg = "models/yolov5n.yaml";
  o.device = std::string("0");
  o.amp = yolo::AmpMode::Bf16;
  o.img_size = 64;
  o.batch_size = 4;
  o.epochs = 3;
  o.workers = 1;
  o.max_batches = 3;
  o.save_period = 1;
  o.noplots = true;
  o.project = project.string();
  return o;
}


}  // namespace

TEST(TrainerCuda, Bf16RunInterruptedAndResumedEqualsAnUninterruptedRun) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const fs::path a = fs::temp_directory_path() / "kestrel_trainer_cuda_a";
  const fs::path b = fs::temp_directory_path() / "kestrel_trainer_cuda_b";
  fs::remove_all(a);
  fs::remove_all(b);
  ASSERT_EQ(yolo::train(tiny_gpu(a)), 0);
  yolo::TrainOptions first = tiny_gpu(b);
  first.interrupt_after = 4;
  ASSERT_EQ(yolo::train(first), 130);
  yolo::TrainOptions resumed = tiny_gpu(b);
  resumed.resume = "";
  ASSERT_EQ(yolo::train(resumed), 0);

  // The final epoch's full state is in its --save-period copy: last is stripped when a run ends.
  kestrel::testing::expect_same_training_state(a / "exp/weights/epoch2.safetensors", b / "exp/weights/epoch2.safetensors");
  kestrel::testing::expect_same_tensors(a / "exp/weights/last.safetensors", b / "exp/weights/last.safetensors");
  EXPECT_EQ(kestrel::testing::read_file(a / "exp/results.csv"), kestrel::testing::read_file(b / "exp/results.csv"));
}

// The whole trainer loop on the GPU over two full epochs of the synthetic set (every batch, with
// validation, checkpoints and plots), in the default precision (bf16 on sm_80+, fp16 with loss
// scaling before): it completes, every value of results.csv is finite, the training loss falls
// from the first epoch to the second, and the run directory is complete.
TEST(TrainerCuda, TwoEpochsOfTheSyntheticSet) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const fs::path project = fs::temp_directory_path() / "kestrel_trainer_cuda_synthetic";
  fs::remove_all(project);
  yolo::TrainOptions o;
  o.cfg = "models/yolov5n.yaml";
  o.data = "synthetic";
  o.device = std::string("0");
  o.img_size = 160;
  o.batch_size = 16;
  o.epochs = 2;
  o.workers = 2;
  o.hyp = "data/hyps/hyp.synthetic.yaml";
  o.project = project.string();
  ASSERT_EQ(yolo::train(o), 0);
  const fs::path run = project / "exp";
  for (const char* f : {"weights/last.safetensors", "weights/best.safetensors", "results.csv",
                        "results.png", "train_batch0.jpg", "val_batch0_pred.jpg"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  std::ifstream in(run / "results.csv");
  std::string line;
  std::getline(in, line);  // header
  std::vector<double> train_loss;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::vector<double> row;
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(std::stod(cell));
    ASSERT_GE(row.size(), 4u);
    for (double v : row) EXPECT_TRUE(std::isfinite(v)) << line;
    train_loss.push_back(row[1] + row[2] + row[3]);
  }
  ASSERT_EQ(train_loss.size(), 2u);
  EXPECT_LT(train_loss[1], train_loss[0]);
}

// The trainer with its steps replayed from CUDA graphs (--cuda-graph on) against the same run
// stepped eagerly (--cuda-graph off): the same results.csv and the same final state, bitwise (the
// same kernels in the same order), over 2 epochs with validation in between.
TEST(TrainerCuda, GraphedRunEqualsEagerRun) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const fs::path a = fs::temp_directory_path() / "kestrel_trainer_cuda_eager";
  const fs::path b = fs::temp_directory_path() / "kestrel_trainer_cuda_graphed";
  fs::remove_all(a);
  fs::remove_all(b);
  yolo::TrainOptions eager = tiny_gpu(a), graphed = tiny_gpu(b);
  eager.epochs = graphed.epochs = 2;
  eager.batch_size = graphed.batch_size = 32;  // an optimizer step every 2 batches
  eager.max_batches = graphed.max_batches = 8;
  eager.cuda_graph = yolo::CudaGraphMode::Off;
  graphed.cuda_graph = yolo::CudaGraphMode::On;
  ASSERT_EQ(yolo::train(eager), 0);
  ::testing::internal::CaptureStdout();
  const int status = yolo::train(graphed);
  const std::string log = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0) << log;
  // 3 eager optimizer steps of warm-up, then the two shapes (accumulating, stepping) replay.
  EXPECT_NE(log.find("CUDA graphs: "), std::string::npos) << log;
  EXPECT_EQ(log.find("CUDA graphs: 0 of"), std::string::npos) << log;
  kestrel::testing::expect_same_training_state(a / "exp/weights/epoch1.safetensors", b / "exp/weights/epoch1.safetensors");
  EXPECT_EQ(kestrel::testing::read_file(a / "exp/results.csv"), kestrel::testing::read_file(b / "exp/results.csv"));
}
