// What a trainer owns for one rank, built around a TrainStep on yolov5n (nc 4, 64 px, batch 2),
// for the train_step tests on the CPU and on CUDA.
#pragma once
#include <limits>
#include <memory>

#include "dist/ddp.h"
#include "dist/reducer.h"
#include "tests/support/testing.h"
#include "yolo/train/train_step.h"

namespace kestrel::yolo::testing {

constexpr int kNc = 4;
constexpr int64_t kImg = 64, kBatch = 2;

struct Rig {
  std::shared_ptr<DetectionModel> model, ema_model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<ComputeLoss> loss;
  std::unique_ptr<GradScaler> scaler;
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<dist::Reducer> reducer;
  std::unique_ptr<dist::TensorBroadcaster> buffers;
  std::unique_ptr<TrainStep> step;

  // float16 compute turns the loss scaler on, as the trainer does.
  Rig(OptimizerKind kind, const RankInfo& rank, Device device = Device::cpu(),
      DType compute = DType::F32, TrainStepOptions step_options = {}) {
    const ModelConfig cfg = load_model_config("models/yolov5n.yaml");
    model = std::make_shared<DetectionModel>(cfg, kNc, 0);
    model->to(device);
    dist::NamedTensors params;
    for (auto& [n, p] : model->named_parameters())
      if (p.requires_grad()) params.emplace_back(n, p);
    if (rank.world > 1) {
      dist::NamedTensors all = model->named_parameters();
      for (auto& b : model->named_buffers()) all.push_back(b);
      dist::broadcast_tensors(*rank.group, all, 0);
    }
    optimizer = std::make_unique<Optimizer>(smart_optimizer(*model, kind, 0.01, 0.937, 5e-4));
    const int nl = static_cast<int>(model->detect().nl);
    loss = std::make_unique<ComputeLoss>(model->detect(), scale_loss_hyp(Hyp{}, nl, kNc, kImg));
    scaler = std::make_unique<GradScaler>(compute == DType::F16);
    if (rank.main()) {
      ema_model = std::make_shared<DetectionModel>(cfg, kNc, 0);
      ema_model->to(device);
      ema = std::make_unique<ModelEma>(ema_model, *model);
    }
    TrainStepParts parts{model.get(), loss.get(), optimizer.get(), scaler.get(), ema.get()};
    if (rank.world > 1) {
      dist::ReducerOptions ropt;
      ropt.bucket_cap_mb = 0.5;  // several buckets
      ropt.record_timeline = false;
      reducer = std::make_unique<dist::Reducer>(params, rank.group, ropt);
      buffers = std::make_unique<dist::TensorBroadcaster>(rank.group, model->named_buffers(), 0);
      parts.reducer = reducer.get();
      parts.buffers = buffers.get();
    }
    step = std::make_unique<TrainStep>(parts, rank, device, step_options);
  }
};

// A float32 NHWC batch in [0, 1) (or all NaN), on the CPU.
inline Tensor input(uint64_t seed, bool nonfinite) {
  if (nonfinite)
    return Tensor::full({kBatch, kImg, kImg, 3}, std::numeric_limits<double>::quiet_NaN());
  return kestrel::testing::random_tensor({kBatch, kImg, kImg, 3}, seed, DType::F32, 0, 1);
}

// Two valid boxes, one per image.
inline Tensor targets() {
  return Tensor::from_vector<float>({0, 1, 0.5f, 0.5f, 0.3f, 0.4f, 1, 2, 0.3f, 0.6f, 0.2f, 0.2f},
                                    {2, 6});
}

// BatchNorm's batch counters (num_batches_tracked), which count every training forward, a
// skipped non-finite batch's too, as PyTorch's do.
inline void expect_same_batch_counts(Rig& got, Rig& want) {
  const auto gb = got.model->named_buffers(), wb = want.model->named_buffers();
  ASSERT_EQ(gb.size(), wb.size());
  for (size_t i = 0; i < wb.size(); ++i) {
    if (wb[i].second.dtype() == DType::I64) {
      EXPECT_EQ(gb[i].second.to_vector<int64_t>(), wb[i].second.to_vector<int64_t>())
          << wb[i].first;
    }
  }
}

// Parameters, optimizer state (with Adam's counts), the EMA's weights and count, and the loss
// scale, bitwise (not buffers: a NaN batch's forward leaves NaN in the BN running statistics,
// which a training-mode forward never reads).
inline void expect_same_state(Rig& got, Rig& want) {
  using kestrel::testing::all_close;
  const auto gp = got.model->named_parameters(), wp = want.model->named_parameters();
  for (size_t i = 0; i < wp.size(); ++i)
    EXPECT_TRUE(all_close(gp[i].second, wp[i].second, 0, 0)) << wp[i].first;
  const auto gs = got.optimizer->state_tensors(), ws = want.optimizer->state_tensors();
  ASSERT_EQ(gs.size(), ws.size());
  for (size_t i = 0; i < ws.size(); ++i)
    EXPECT_TRUE(all_close(gs[i].second, ws[i].second, 0, 0)) << ws[i].first;
  EXPECT_EQ(got.ema->updates(), want.ema->updates());
  const auto ge = got.ema_model->named_parameters(), we = want.ema_model->named_parameters();
  for (size_t i = 0; i < we.size(); ++i)
    EXPECT_TRUE(all_close(ge[i].second, we[i].second, 0, 0)) << we[i].first;
  EXPECT_EQ(got.scaler->state().scale, want.scaler->state().scale);
}

}  // namespace kestrel::yolo::testing
