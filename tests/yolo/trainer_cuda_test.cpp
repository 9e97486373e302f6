// The interruption and resume guarantees on a GPU with bf16 autocast: a run interrupted mid-epoch
// (as by SIGINT, exit 130) and resumed ends with the same model, EMA and optimizer state and the
// same results.csv as an uninterrupted run. Bitwise, as on the CPU: Kestrel's CUDA kernels reduce
// without float atomics and the convolution picks only deterministic cuDNN algorithms. (The pick
// is timed per process; should two processes pick different ones, this test is where it shows.)
// Skipped without a CUDA device.
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/testing.h"
#include "tests/yolo/training_state.h"
#include "yolo/trainer.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

yolo::TrainOptions tiny_gpu(const fs::path& project) {
  yolo::TrainOptions o;
  o.cfg = "models/yolov5n.yaml";
  o.device = std::string("0");
  o.amp = std::string("bf16");  // std::string: short literals here trip GCC 12's false -Wrestrict
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
