// The training step on a GPU (yolov5n, 64 px, batch 2; skipped without a CUDA device):
//   - forward/backward and the optimizer step make no blocking host read on CUDA: the guard would
//     throw at any stream or event synchronisation and any device-to-host copy that waits; the
//     one read per batch is the previous batch's status (fp32, bf16 and fp16: the loss scaler's
//     state and its skip decision stay on the device);
//   - bf16 and fp16 steps follow fp32: 6 SGD steps on the same batches from the same weights,
//     each step's loss within the compute dtype's tolerance of fp32's. bf16 keeps 8 mantissa bits
//     (2^-8 = 0.4 % per rounding) and the errors of ~60 layers partly cancel in the loss sums:
//     6 % relative; fp16 keeps 11 bits: 1.5 %. The fp32 run itself stays finite and moves.
//   - a non-finite batch is skipped on the device and the run continues (the CPU test proves the
//     bitwise equality; here: parameters unchanged by the skipped step).
#include <cmath>

#include "engine/host_sync.h"
#include "engine/stream.h"
#include "tests/support/testing.h"
#include "tests/yolo/train/train_step_rig.h"

namespace kestrel::yolo {
namespace {

using testing::input;
using testing::Rig;
using testing::targets;

const Device kGpu = Device::cuda(0);

std::string sites_of(const HostSyncGuard& g) {
  std::string s;
  for (const std::string& site : g.sites()) s += site + "; ";
  return s;
}

// Batch i's loss (box + obj + cls) for `steps` optimizer steps in `compute`.
std::vector<double> losses(DType compute, int steps) {
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  Rig rig(OptimizerKind::SGD, RankInfo{}, kGpu, compute);
  const Tensor t = targets().to(kGpu);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    rig.step->forward_backward(input(20 + i, false).to(compute).to(kGpu), t, i, true, false);
    for (const BatchStatus& s : rig.step->take_previous()) out.push_back(s.box + s.obj + s.cls);
    rig.step->optimizer_step();
  }
  for (const BatchStatus& s : rig.step->drain()) out.push_back(s.box + s.obj + s.cls);
  return out;
}

TEST(TrainStepCuda, StepIssuesNoBlockingReadOnTheDevice) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (DType compute : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(compute));
    const Stream stream = Stream::create(kGpu);
    StreamGuard on_stream(stream);
    Rig rig(OptimizerKind::SGD, RankInfo{}, kGpu, compute);
    const Tensor t = targets().to(kGpu);
    for (int64_t i = 0; i < 4; ++i) {
      const Tensor x = input(30 + i, false).to(compute).to(kGpu);
      {
        HostSyncGuard none(HostSyncGuard::Policy::Throw);
        rig.step->forward_backward(x, t, i, true, false);
      }
      {
        HostSyncGuard reads(HostSyncGuard::Policy::Count);
        EXPECT_EQ(static_cast<int64_t>(rig.step->take_previous().size()), i == 0 ? 0 : 1);
        // The status copy's event, and the same event again as each of its two pinned buffers
        // goes back to the pool: all of one finished copy.
        EXPECT_LE(reads.count(), i == 0 ? 0 : 3) << sites_of(reads);
      }
      HostSyncGuard reads(HostSyncGuard::Policy::Count);
      rig.step->optimizer_step();
      EXPECT_EQ(reads.count(), 0) << sites_of(reads);
    }
    stream.synchronize();
  }
}

TEST(TrainStepCuda, HalfPrecisionStepsFollowFloat32) {
  KESTREL_SKIP_WITHOUT_CUDA();
  constexpr int kSteps = 6;
  const std::vector<double> f32 = losses(DType::F32, kSteps);
  ASSERT_EQ(f32.size(), static_cast<size_t>(kSteps));
  for (double l : f32) ASSERT_TRUE(std::isfinite(l) && l > 0) << l;
  EXPECT_NE(f32.front(), f32.back()) << "the steps must change the model";
  for (auto [compute, rtol] : {std::pair{DType::BF16, 0.06}, std::pair{DType::F16, 0.015}}) {
    const std::vector<double> half = losses(compute, kSteps);
    ASSERT_EQ(half.size(), f32.size());
    for (int i = 0; i < kSteps; ++i)
      EXPECT_NEAR(half[i], f32[i], rtol * std::abs(f32[i])) << dtype_name(compute) << " step " << i;
  }
}

TEST(TrainStepCuda, NonFiniteBatchIsSkippedOnTheDevice) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Rig rig(OptimizerKind::Adam, RankInfo{}, kGpu, DType::BF16);
  const Tensor t = targets().to(kGpu);
  rig.step->forward_backward(input(1, false).to(DType::BF16).to(kGpu), t, 0, true, false);
  rig.step->optimizer_step();
  std::vector<Tensor> before;
  for (const Tensor& p : rig.optimizer->parameters()) before.push_back(p.clone());
  const int64_t ema_updates = rig.ema->updates();
  rig.step->forward_backward(input(2, true).to(DType::BF16).to(kGpu), t, 1, true, false);
  rig.step->take_previous();
  rig.step->optimizer_step();
  const std::vector<BatchStatus> s = rig.step->drain();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].nonfinite_ranks, 1);
  EXPECT_EQ(rig.ema->updates(), ema_updates);  // the device count stayed put
  const std::vector<Tensor> after = rig.optimizer->parameters();
  for (size_t k = 0; k < after.size(); ++k)
    EXPECT_TRUE(kestrel::testing::all_close(after[k], before[k], 0, 0)) << k;
  for (const auto& [name, state] : rig.optimizer->state_tensors()) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".step") == 0) {
      EXPECT_EQ(state.item(), 1.0) << name;  // Adam's count: not advanced by the skipped step
    }
  }
}

}  // namespace
}  // namespace kestrel::yolo
