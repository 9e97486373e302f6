// Checkpoints: a round trip restores every part exactly, incomplete or mismatched files are
// refused, and a run stopped after epoch k and resumed from its checkpoint ends bitwise equal to
// an uninterrupted run (CPU; a tiny Conv-BN-SiLU + Conv2d model trained as the reference's loop
// does: warmup, accumulation, clipping, EMA, LambdaLR steps).
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "layers/conv.h"
#include "tests/support/testing.h"
#include "yolo/checkpoint.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

class Tiny : public layers::Module {
 public:
  explicit Tiny(uint64_t seed) {
    Generator g(seed);
    conv = register_module("0", std::make_shared<layers::Conv>(3, 8, 3, 1, std::nullopt, g));
    head = register_module("1", std::make_shared<layers::Conv2d>(8, 2, 1, 1, 0, true, g));
  }
  std::string type_name() const override { return "Tiny"; }
  Tensor forward(const Tensor& x) { return head->forward(conv->forward(x)); }

  std::shared_ptr<layers::Conv> conv;
  std::shared_ptr<layers::Conv2d> head;
};

constexpr int64_t kEpochs = 4, kBatches = 30, kBatch = 16;  // nw = 100 of 120 iterations

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kestrel_ckpt_" + name)).string();
}

// One training run, as the reference's loop drives the pieces.
struct TrainingRun {
  Hyp hyp;
  Tiny model{1};
  ModelEma ema{std::make_shared<Tiny>(2), model};
  Optimizer opt;
  LrSchedule sched;
  GradScaler scaler{false};
  Generator data{7, 3};

  explicit TrainingRun(OptimizerKind kind)
      : opt(smart_optimizer(model, kind, kind == OptimizerKind::SGD ? 0.01 : 0.001, hyp.momentum,
                            scaled_weight_decay(hyp.weight_decay, kBatch))),
        sched(hyp, kEpochs, false, kBatch, kBatches, opt) {
    sched.set_last_epoch(-1);
  }

  TrainingObjects objects() { return {&model, &ema, &opt, &sched, &scaler}; }

  void train_epoch(int64_t epoch) {
    model.train(true);
    opt.zero_grad();
    for (int64_t i = 0; i < kBatches; ++i) {
      const int64_t ni = i + kBatches * epoch;
      sched.warmup(ni, epoch);
      Tensor x = Tensor::empty({kBatch, 6, 6, 3});
      data.fill_uniform(x, 0.0, 1.0);
      Tensor y = model.forward(x);
      Tensor d = ops::sub(y, Tensor::full(y.shape(), 0.5));
      Tensor loss = ops::mul(ops::mean_all(ops::mul(d, d)), static_cast<double>(kBatch));
      scaler.scale(loss).backward();
      if (sched.step_due(ni)) {
        scaler.unscale(opt);
        clip_grad_norm(opt.parameters(), 10.0);
        scaler.step(opt);
        scaler.update();
        opt.zero_grad();
        ema.update(model);
        sched.record_step(ni);
      }
    }
    sched.epoch_end();
  }

  CheckpointInfo info(int64_t epoch) {
    CheckpointInfo i;
    i.epoch = epoch;
    i.best_fitness = 0.125 * epoch;
    i.hyp = hyp;
    i.options = json::Object{{"epochs", json::Value(kEpochs)}, {"name", "tiny"}};
    i.generators.push_back(generator_state("data", data));
    return i;
  }
};

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  Tensor x = a.contiguous(), y = b.contiguous();
  if (x.shape() != y.shape() || x.dtype() != y.dtype())
    return ::testing::AssertionFailure() << what << ": " << x.describe() << " vs " << y.describe();
  if (std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) != 0)
    return ::testing::AssertionFailure() << what << " differs";
  return ::testing::AssertionSuccess();
}

void expect_same_state(TrainingRun& a, TrainingRun& b) {
  auto ma = a.model.state_entries(), mb = b.model.state_entries();
  for (size_t i = 0; i < ma.size(); ++i) EXPECT_TRUE(same_bits(*ma[i].slot, *mb[i].slot, ma[i].name));
  auto ea = a.ema.module().state_entries(), eb = b.ema.module().state_entries();
  for (size_t i = 0; i < ea.size(); ++i)
    EXPECT_TRUE(same_bits(*ea[i].slot, *eb[i].slot, "ema " + ea[i].name));
  auto oa = a.opt.state_tensors(), ob = b.opt.state_tensors();
  ASSERT_EQ(oa.size(), ob.size());
  for (size_t i = 0; i < oa.size(); ++i) EXPECT_TRUE(same_bits(oa[i].second, ob[i].second, oa[i].first));
  EXPECT_EQ(a.ema.updates(), b.ema.updates());
  for (size_t g = 0; g < a.opt.groups().size(); ++g) {
    EXPECT_EQ(a.opt.groups()[g].lr, b.opt.groups()[g].lr);
    EXPECT_EQ(a.opt.groups()[g].momentum, b.opt.groups()[g].momentum);
  }
  EXPECT_EQ(a.sched.state().last_opt_step, b.sched.state().last_opt_step);
  EXPECT_EQ(a.data.offset(), b.data.offset());
}

}  // namespace

TEST(Checkpoint, RoundTripRestoresEverything) {
  TrainingRun a(OptimizerKind::SGD);
  a.train_epoch(0);
  a.scaler.load_state({1024.0, 17, 3});
  const std::string path = temp_path("roundtrip.safetensors");
  save_checkpoint(path, a.objects(), a.info(0));

  TrainingRun b(OptimizerKind::SGD);
  CheckpointInfo info = load_checkpoint(path, b.objects());
  b.data = restore_generator(info.generators.at(0));
  expect_same_state(a, b);
  EXPECT_EQ(info.epoch, 0);
  EXPECT_EQ(info.best_fitness, 0.0);
  EXPECT_EQ(info.hyp.values(), a.hyp.values());
  EXPECT_EQ(json::dump(info.options), R"({"epochs":4,"name":"tiny"})");
  EXPECT_EQ(info.generators[0].name, "data");
  EXPECT_EQ(b.scaler.scale_value(), 1024.0);
  EXPECT_EQ(b.scaler.state().growth_tracker, 17);
  EXPECT_EQ(b.scaler.skipped_steps(), 3);
  EXPECT_EQ(b.sched.state().last_epoch, 0);
  EXPECT_EQ(b.sched.accumulate(), a.sched.accumulate());
  EXPECT_EQ(read_checkpoint_info(path).epoch, 0);
  std::remove(path.c_str());
}

TEST(Checkpoint, IncompleteOrMismatchedFilesAreRefused) {
  TrainingRun a(OptimizerKind::SGD);
  const std::string path = temp_path("stripped.safetensors");
  save_checkpoint(path, {&a.model}, a.info(3));  // weights and info only
  TrainingRun b(OptimizerKind::SGD);
  EXPECT_EQ(load_checkpoint(path, {&b.model}).epoch, 3);
  EXPECT_THROW(load_checkpoint(path, b.objects()), Error);
  save_checkpoint(path, a.objects(), a.info(3));
  TrainingRun adam(OptimizerKind::Adam);
  EXPECT_THROW(load_checkpoint(path, adam.objects()), Error);  // optimizer kind differs
  Generator g(1);
  layers::Conv wrong(3, 4, 3, 1, std::nullopt, g);
  EXPECT_THROW(load_checkpoint(path, {&wrong}), Error);
  std::remove(path.c_str());
}

class Resume : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(Resume, StoppedAndResumedEqualsUninterrupted) {
  TrainingRun whole(GetParam());
  for (int64_t e = 0; e < kEpochs; ++e) whole.train_epoch(e);

  const std::string path = temp_path("last.safetensors");
  {
    TrainingRun first(GetParam());
    for (int64_t e = 0; e < 2; ++e) {
      first.train_epoch(e);
      save_checkpoint(path, first.objects(), first.info(e));  // "last" after every epoch
    }
  }
  TrainingRun resumed(GetParam());
  const CheckpointInfo info = load_checkpoint(path, resumed.objects());
  resumed.data = restore_generator(info.generators.at(0));
  const int64_t start_epoch = info.epoch + 1;
  resumed.sched.set_last_epoch(start_epoch - 1);
  for (int64_t e = start_epoch; e < kEpochs; ++e) resumed.train_epoch(e);
  std::remove(path.c_str());

  expect_same_state(whole, resumed);
  EXPECT_GT(whole.ema.updates(), 20);
  // The run really trained: the weights moved from their initialisation.
  Tiny init(1);
  EXPECT_FALSE(same_bits(init.conv->conv->weight, whole.model.conv->conv->weight, "w"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Resume,
                         ::testing::Values(OptimizerKind::SGD, OptimizerKind::AdamW));
