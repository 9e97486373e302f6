// Checkpoints: a round trip restores every part exactly, incomplete or mismatched files are
// refused, and a run stopped after epoch k and resumed from its checkpoint ends bitwise equal to
// an uninterrupted run (CPU; a tiny Conv-BN-SiLU + Conv2d model trained as the reference's loop
// does: warmup, accumulation, clipping, EMA, LambdaLR steps). Pending accumulated gradients are
// written for exactly the parameters whose .grad is defined and come back bitwise: as a new .grad
// where there was none, copied in place (same storage) where there was one, and a file without
// them leaves .grad alone; the trainer's progress metadata round-trips too.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "engine/safetensors_tensors.h"
#include "layers/conv.h"
#include "tests/support/testing.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/train_progress.h"

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

namespace {

// Every parameter but the last gets a .grad (distinct random values); the last has none.
PendingGradients with_pending_gradients(Tiny& model) {
  PendingGradients params = model.named_parameters();
  for (size_t i = 0; i + 1 < params.size(); ++i) {
    const Tensor& p = params[i].second;
    p.set_grad(kestrel::testing::random_tensor(p.shape(), 100 + i, p.dtype()));
  }
  return params;
}

}  // namespace

TEST(Checkpoint, PendingGradientsAreWrittenAndRestored) {
  TrainingRun a(OptimizerKind::SGD);
  const PendingGradients saved = with_pending_gradients(a.model);
  ASSERT_GE(saved.size(), 3u);
  ASSERT_FALSE(saved.back().second.grad().defined());
  const std::string path = temp_path("pending_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path, a.objects(), a.info(1), saved);

  // Exactly the defined gradients are in the file, under grad.<name>.
  {
    const SafetensorsFile f = load_safetensors(path);
    for (size_t i = 0; i < saved.size(); ++i)
      EXPECT_EQ(f.contains("grad." + saved[i].first), i + 1 < saved.size()) << saved[i].first;
  }

  // Fresh parameters without .grad: each gets a new one equal to the saved.
  TrainingRun b(OptimizerKind::SGD);
  const PendingGradients fresh = b.model.named_parameters();
  for (const auto& [name, p] : fresh) ASSERT_FALSE(p.grad().defined()) << name;
  load_checkpoint(path, b.objects(), fresh);
  for (size_t i = 0; i + 1 < saved.size(); ++i) {
    ASSERT_TRUE(fresh[i].second.grad().defined()) << saved[i].first;
    EXPECT_TRUE(same_bits(fresh[i].second.grad(), saved[i].second.grad(), "grad " + saved[i].first));
    EXPECT_EQ(fresh[i].second.grad().device(), fresh[i].second.device());
  }
  EXPECT_FALSE(fresh.back().second.grad().defined()) << "the file has no gradient for it";

  // Parameters with a .grad (as a DDP Reducer's views into its flat buffer): copied in place.
  TrainingRun c(OptimizerKind::SGD);
  const PendingGradients live = c.model.named_parameters();
  std::vector<void*> where;
  for (const auto& [name, p] : live) {
    p.set_grad(Tensor::full(p.shape(), 0.0, p.dtype()));
    where.push_back(p.grad().data_ptr());
  }
  load_checkpoint(path, c.objects(), live);
  for (size_t i = 0; i < live.size(); ++i) {
    EXPECT_EQ(live[i].second.grad().data_ptr(), where[i]) << "not in place: " << live[i].first;
    if (i + 1 < live.size()) {
      EXPECT_TRUE(same_bits(live[i].second.grad(), saved[i].second.grad(), "in-place " + live[i].first));
    }
  }
  EXPECT_TRUE(same_bits(live.back().second.grad(), Tensor::full(live.back().second.shape(), 0.0,
                                                                live.back().second.dtype()),
                        "untouched " + live.back().first));

  // Not asking for gradients leaves .grad alone even though the file has them.
  TrainingRun d(OptimizerKind::SGD);
  load_checkpoint(path, d.objects());
  for (const auto& [name, p] : d.model.named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;

  // A gradient that does not fit its parameter is refused.
  TrainingRun e(OptimizerKind::SGD);
  const PendingGradients params = e.model.named_parameters();
  PendingGradients misnamed = {{saved[0].first, params.back().second}};
  ASSERT_NE(saved[0].second.shape(), params.back().second.shape());
  EXPECT_THROW(load_checkpoint(path, e.objects(), misnamed), Error);
  std::remove(path.c_str());
}

TEST(Checkpoint, FileWithoutGradientsLeavesGradAlone) {
  TrainingRun a(OptimizerKind::SGD);
  const std::string path = temp_path("nograd_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path, a.objects(), a.info(1));  // no pending gradients passed
  save_checkpoint(path, a.objects(), a.info(1), a.model.named_parameters());  // none defined either
  {
    const SafetensorsFile f = load_safetensors(path);
    for (const std::string& name : f.names()) EXPECT_NE(name.rfind("grad.", 0), 0u) << name;
  }
  TrainingRun b(OptimizerKind::SGD);
  const PendingGradients with = with_pending_gradients(b.model);
  std::vector<Tensor> before;
  for (const auto& [name, p] : with) before.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  load_checkpoint(path, b.objects(), with);
  for (size_t i = 0; i < with.size(); ++i) {
    if (!before[i].defined()) {
      EXPECT_FALSE(with[i].second.grad().defined()) << with[i].first;
      continue;
    }
    EXPECT_TRUE(same_bits(with[i].second.grad(), before[i], "kept " + with[i].first));
  }
  std::remove(path.c_str());
}

TEST(Checkpoint, ProgressMetadataRoundTrips) {
  TrainingRun a(OptimizerKind::SGD);
  RunProgress progress;
  progress.epoch.next_batch = 12;
  progress.epoch.mloss[0] = 0.1 + 0.2;
  progress.epoch.mloss[1] = 1e-300;
  progress.epoch.mloss[2] = 123456.789;
  progress.epoch.seen = 11;
  progress.epoch.skipped = 1;
  progress.nan_steps = 4;
  progress.stopper = {0.6941176470588235, 7};
  progress.accumulated = true;
  CheckpointInfo info = a.info(2);
  info.progress = progress.to_json();
  const std::string path = temp_path("progress_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path, {&a.model}, info);

  const CheckpointInfo back = read_checkpoint_info(path);
  EXPECT_EQ(json::dump(back.progress), json::dump(info.progress));
  const RunProgress p = RunProgress::from_json(back.progress, path);
  EXPECT_EQ(p.epoch.next_batch, 12);
  EXPECT_EQ(p.epoch.mloss[0], 0.1 + 0.2);
  EXPECT_EQ(p.epoch.mloss[1], 1e-300);
  EXPECT_EQ(p.epoch.mloss[2], 123456.789);
  EXPECT_EQ(p.epoch.seen, 11);
  EXPECT_EQ(p.epoch.skipped, 1);
  EXPECT_EQ(p.nan_steps, 4);
  EXPECT_EQ(p.stopper.best_fitness, 0.6941176470588235);
  EXPECT_EQ(p.stopper.best_epoch, 7);
  EXPECT_TRUE(p.accumulated);
  TrainingRun b(OptimizerKind::SGD);
  EXPECT_EQ(json::dump(load_checkpoint(path, {&b.model}).progress), json::dump(info.progress));

  // No progress given: an empty object, read back as the epoch-boundary defaults.
  save_checkpoint(path, {&a.model}, a.info(2));
  const CheckpointInfo plain = read_checkpoint_info(path);
  EXPECT_EQ(json::dump(plain.progress), "{}");
  const RunProgress d = RunProgress::from_json(plain.progress, path);
  EXPECT_EQ(d.epoch.next_batch, 0);
  EXPECT_FALSE(d.accumulated);
  std::remove(path.c_str());
}

// A diverged run's checkpoint (NaN in the EMA) is refused on --resume, naming the file and the
// tensor, before anything is copied into the model.
TEST(Checkpoint, NonFiniteTensorsAreNamedOnLoad) {
  TrainingRun a(OptimizerKind::SGD);
  a.train_epoch(0);
  const std::string path = temp_path("nan_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path, a.objects(), a.info(0));
  SafetensorsFile f = load_safetensors(path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::string poisoned;
  for (const std::string& name : f.names()) {
    Tensor t = safetensors_tensor(f, name);
    if (poisoned.empty() && name.rfind("ema.", 0) == 0 && is_floating(t.dtype())) {
      std::vector<double> v = t.to_double_vector();
      v[0] = std::nan("");
      t = Tensor::from_vector(v, t.shape()).to(t.dtype());
      poisoned = name;
    }
    tensors.emplace_back(name, t);
  }
  save_safetensors(path, tensors, f.metadata());
  TrainingRun b(OptimizerKind::SGD);
  try {
    load_checkpoint(path, b.objects());
    ADD_FAILURE() << "a checkpoint holding NaN was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(poisoned), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// strip_checkpoint, as the reference's strip_optimizer: the EMA's weights as "model.*" in float16
// (a running variance past float16's range stays float32 rather than becoming Inf), integer
// buffers as they were, no optimizer, gradients or resume state; the file is marked stripped, is
// refused by load_checkpoint naming itself, and stripping it again changes nothing.
TEST(Checkpoint, StrippedFileKeepsTheEmaInHalfPrecisionAndRefusesToResume) {
  TrainingRun a(OptimizerKind::SGD);
  a.train_epoch(0);
  std::string huge;
  for (const layers::StateEntry& e : a.ema.module().state_entries())
    if (e.name.find("running_var") != std::string::npos) {
      e.slot->fill_(1e6);
      huge = e.name;
    }
  ASSERT_FALSE(huge.empty());
  const std::string path = temp_path("strip_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path, a.objects(), a.info(0), a.model.named_parameters());
  const SafetensorsFile full = load_safetensors(path);
  const uint64_t bytes = strip_checkpoint(path);
  EXPECT_EQ(bytes, std::filesystem::file_size(path));
  const SafetensorsFile s = load_safetensors(path);
  std::vector<std::string> expected;
  for (const layers::StateEntry& e : a.ema.module().state_entries()) expected.push_back("model." + e.name);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(s.names(), expected);
  for (const std::string& name : s.names()) {
    Tensor ema = safetensors_tensor(full, "ema." + name.substr(6));
    const std::string want = !is_floating(ema.dtype()) ? full.entry("ema." + name.substr(6)).dtype
                             : name == "model." + huge ? "F32" : "F16";
    EXPECT_EQ(s.entry(name).dtype, want) << name;
    if (want == "F16") ema = ema.to(DType::F16);
    EXPECT_EQ(safetensors_tensor(s, name).to_double_vector(), ema.to_double_vector()) << name;
  }
  for (const char* key : {"optimizer", "schedule", "scaler", "ema_updates", "progress"})
    EXPECT_EQ(s.metadata().count(key), 0u) << key;
  EXPECT_EQ(s.metadata().at("options"), full.metadata().at("options"));
  const CheckpointInfo info = read_checkpoint_info(path);
  EXPECT_TRUE(info.stripped);
  EXPECT_EQ(info.epoch, 0);
  TrainingRun b(OptimizerKind::SGD);
  try {
    load_checkpoint(path, b.objects());
    ADD_FAILURE() << "a stripped checkpoint was resumed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "' is a stripped final checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--weights " + path), std::string::npos) << e.what();
  }
  EXPECT_EQ(strip_checkpoint(path), bytes);
  EXPECT_EQ(load_safetensors(path).names(), expected);
  std::remove(path.c_str());
}
