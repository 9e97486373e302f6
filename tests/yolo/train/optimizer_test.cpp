// Parameter groups (the reference's smart_optimizer on yolov5n), SGD / Adam / AdamW / RMSProp
// steps through the Optimizer against hand-computed values, weight-decay scaling and gradient
// clipping; the device-resident per-step values (upload_hyper / issue_step, Adam's step counts),
// skipped steps and gradients zeroed in place.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "layers/conv.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"
#include "yolo/train/optimizer.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Tensor param(const std::vector<double>& v) {
  return Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())}).set_requires_grad();
}

// Three one-parameter groups (bias, decayed weight, BN weight) with the same value and gradient.
std::vector<ParamGroup> three_groups(double lr, double momentum, double wd) {
  std::vector<ParamGroup> g(3);
  const char* labels[] = {"bias", "weight(decay)", "weight(no decay)"};
  for (int i = 0; i < 3; ++i) {
    g[i].label = labels[i];
    g[i].lr = g[i].initial_lr = lr;
    g[i].momentum = momentum;
    Tensor p = param({1.0, -2.0});
    p.set_grad(Tensor::from_vector<double>({0.5, 0.25}, {2}));
    const char* names[] = {"p0", "p1", "p2"};
    g[i].params.push_back({names[i], p, false});
  }
  g[1].weight_decay = wd;
  return g;
}

}  // namespace

TEST(Optimizer, GroupsOfYolov5nAsTheReference) {
  DetectionModel model(load_model_config("models/yolov5n.yaml"));
  std::vector<ParamGroup> groups = make_param_groups(model, 0.01, 0.937, 0.0005);
  ASSERT_EQ(groups.size(), 3u);
  // The reference logs "57 weight(decay=0.0), 60 weight(decay=0.0005), 60 bias" for v5n/v5s.
  EXPECT_EQ(groups[0].params.size(), 60u);
  EXPECT_EQ(groups[1].params.size(), 60u);
  EXPECT_EQ(groups[2].params.size(), 57u);
  for (const Parameter& p : groups[0].params) EXPECT_TRUE(ends_with(p.name, ".bias")) << p.name;
  for (const Parameter& p : groups[1].params)
    EXPECT_TRUE(ends_with(p.name, "conv.weight") || p.name.rfind("model.24.m.", 0) == 0) << p.name;
  for (const Parameter& p : groups[2].params) EXPECT_TRUE(ends_with(p.name, "bn.weight")) << p.name;
  EXPECT_EQ(groups[0].weight_decay, 0.0);
  EXPECT_EQ(groups[1].weight_decay, 0.0005);
  EXPECT_EQ(groups[2].weight_decay, 0.0);
  EXPECT_EQ(groups[1].params.front().name, "model.0.conv.weight");
  EXPECT_TRUE(groups[1].params.front().ohwi_conv_weight);
  size_t total = 0;
  for (const auto& g : groups) total += g.params.size();
  EXPECT_EQ(total, model.named_parameters().size());
  Optimizer opt(OptimizerKind::SGD, groups);
  EXPECT_EQ(opt.describe(),
            "SGD(lr=0.01) with parameter groups 57 weight(decay=0.0), 60 weight(decay=0.0005), "
            "60 bias");
}

TEST(Optimizer, WeightDecayScaling) {
  EXPECT_EQ(nominal_accumulate(16), 4);
  EXPECT_EQ(nominal_accumulate(24), 3);   // round(2.67)
  EXPECT_EQ(nominal_accumulate(128), 1);  // round(0.5) = 0 (half to even), at least 1
  EXPECT_EQ(nominal_accumulate(43), 1);
  EXPECT_DOUBLE_EQ(scaled_weight_decay(0.0005, 16), 0.0005);
  EXPECT_DOUBLE_EQ(scaled_weight_decay(0.0005, 24), 0.0005 * 72 / 64);
  EXPECT_DOUBLE_EQ(scaled_weight_decay(0.0005, 128), 0.0005 * 2);
  EXPECT_THROW(nominal_accumulate(0), Error);
}

TEST(Optimizer, SgdNesterovDecaysOnlyTheDecayGroup) {
  Optimizer opt(OptimizerKind::SGD, three_groups(0.1, 0.9, 0.01));
  opt.step();
  // First step: buf = d, p -= lr (d + 0.9 d), d = g (+ wd p in group 1).
  for (int gi = 0; gi < 3; ++gi) {
    const std::vector<double> p = opt.groups()[gi].params[0].tensor.to_vector<double>();
    const double d0 = 0.5 + (gi == 1 ? 0.01 * 1.0 : 0.0), d1 = 0.25 + (gi == 1 ? 0.01 * -2.0 : 0.0);
    EXPECT_NEAR(p[0], 1.0 - 0.1 * 1.9 * d0, 1e-15) << gi;
    EXPECT_NEAR(p[1], -2.0 - 0.1 * 1.9 * d1, 1e-15) << gi;
  }
  // Second step with the same gradient: buf = 0.9 d + d (group 0, no decay: d constant).
  opt.step();
  const double after1 = 1.0 - 0.1 * 1.9 * 0.5, buf2 = 0.9 * 0.5 + 0.5;
  EXPECT_NEAR(opt.groups()[0].params[0].tensor.to_vector<double>()[0],
              after1 - 0.1 * (0.5 + 0.9 * buf2), 1e-15);
  auto state = opt.state_tensors();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].first, "p0.momentum_buffer");
  EXPECT_NEAR(state[0].second.to_vector<double>()[0], buf2, 1e-15);
}

TEST(Optimizer, ParametersWithoutGradientAreLeftAlone) {
  auto groups = three_groups(0.1, 0.9, 0.01);
  groups[2].params[0].tensor.set_grad(Tensor());
  Optimizer opt(OptimizerKind::SGD, groups);
  opt.step();
  EXPECT_EQ(opt.groups()[2].params[0].tensor.to_vector<double>(), (std::vector<double>{1.0, -2.0}));
  EXPECT_NE(opt.groups()[0].params[0].tensor.to_vector<double>()[0], 1.0);
  opt.zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(opt.groups()[0].params[0].tensor.grad().defined());
}

// zero_grad() keeps every gradient's memory and zeroes it (the next backward accumulates into
// it); a parameter without a gradient keeps none.
TEST(Optimizer, ZeroGradZeroesInPlace) {
  auto groups = three_groups(0.1, 0.9, 0.01);
  groups[2].params[0].tensor.set_grad(Tensor());
  Optimizer opt(OptimizerKind::SGD, groups);
  const Tensor p = opt.groups()[0].params[0].tensor;
  p.grad().copy_(Tensor::from_vector<double>({-0.0, 3.0}, {2}));
  const void* before = p.grad().data_ptr();
  opt.zero_grad();
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().data_ptr(), before);
  EXPECT_EQ(p.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0}));
  EXPECT_FALSE(std::signbit(p.grad().to_vector<double>()[0]));
  EXPECT_FALSE(opt.groups()[2].params[0].tensor.grad().defined());
  // A backward after zero_grad adds into the same memory: 0 + g is g.
  Tensor y = ops::mul(p, 3.0);
  ops::sum_all(y).backward();
  EXPECT_EQ(p.grad().data_ptr(), before);
  EXPECT_EQ(p.grad().to_vector<double>(), (std::vector<double>{3.0, 3.0}));
}

// Training with gradients zeroed in place equals training with gradients dropped, bit for bit:
// the first backward after zero_grad adds into zeros (0 + g is g; only a -0.0 gradient would come
// out +0.0, which no update below can tell apart). Conv + BN + SiLU, SGD and AdamW, 4 steps.
TEST(Optimizer, ZeroingInPlaceTrainsAsDroppingGradients) {
  for (OptimizerKind kind : {OptimizerKind::SGD, OptimizerKind::AdamW}) {
    SCOPED_TRACE(optimizer_kind_name(kind));
    std::vector<std::vector<Tensor>> params(2);
    for (int run = 0; run < 2; ++run) {
      Generator gen(3);
      layers::Conv model(3, 8, 3, 1, std::nullopt, gen);
      Optimizer opt = smart_optimizer(model, kind, 0.01, 0.9, 5e-4);
      for (int step = 0; step < 4; ++step) {
        const Tensor x = kestrel::testing::random_tensor({2, 6, 6, 3}, 10 + step, DType::F32);
        const Tensor y = model.forward(x);
        ops::sum_all(ops::mul(y, y)).backward();
        opt.step();
        opt.zero_grad(/*set_to_none=*/run == 1);
      }
      params[run] = opt.parameters();
    }
    ASSERT_EQ(params[0].size(), params[1].size());
    for (size_t k = 0; k < params[0].size(); ++k) {
      const Tensor& a = params[0][k];
      const Tensor& b = params[1][k];
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()), 0) << k;
    }
  }
}

namespace {
void set_lr_and_momentum(Optimizer& opt, size_t group, double lr, double momentum) {
  Optimizer::Rates r = opt.rates(group);
  r.lr = lr;
  r.momentum = momentum;
  opt.set_rates(group, r);
}
}  // namespace

// The schedule writes the host groups; step() uploads them, so a changed lr / momentum takes
// effect at the next step.
TEST(Optimizer, ChangedLrAndMomentumTakeEffectAtTheNextStep) {
  Optimizer opt(OptimizerKind::SGD, three_groups(0.1, 0.9, 0.0));
  opt.step();
  set_lr_and_momentum(opt, 0, 0.5, 0.0);
  opt.step();
  // Group 0, second step: buf = 0·buf + g = 0.5, p -= 0.5 (g + 0·buf) = 0.25.
  const double after1 = 1.0 - 0.1 * 1.9 * 0.5;
  EXPECT_NEAR(opt.groups()[0].params[0].tensor.to_vector<double>()[0], after1 - 0.5 * 0.5, 1e-15);
  // Group 1 kept lr 0.1, momentum 0.9: buf = 0.9 · 0.5 + 0.5.
  const double buf2 = 0.9 * 0.5 + 0.5;
  EXPECT_NEAR(opt.groups()[1].params[0].tensor.to_vector<double>()[0],
              after1 - 0.1 * (0.5 + 0.9 * buf2), 1e-15);
  EXPECT_EQ(opt.device_hyper().to_vector<double>(),
            (std::vector<double>{0.5, 0.0, 0.1, 0.9, 0.1, 0.9}));
}

// issue_step() reads the values last uploaded, not the host groups: the device tensor really is
// what the kernels read.
TEST(Optimizer, IssueStepUsesTheUploadedValues) {
  for (OptimizerKind kind : {OptimizerKind::SGD, OptimizerKind::Adam}) {
    SCOPED_TRACE(optimizer_kind_name(kind));
    Optimizer uploaded(kind, three_groups(0.1, 0.9, 0.0));
    Optimizer reference(kind, three_groups(0.1, 0.9, 0.0));
    for (Optimizer* o : {&uploaded, &reference}) {
      set_lr_and_momentum(*o, 1, 0.03, 0.5);
      o->upload_hyper();
    }
    set_lr_and_momentum(uploaded, 1, 7.0, 0.0);  // not uploaded: ignored by the next two steps
    for (int i = 0; i < 2; ++i) {
      uploaded.issue_step();
      reference.issue_step();
    }
    for (int gi = 0; gi < 3; ++gi)
      EXPECT_EQ(uploaded.groups()[gi].params[0].tensor.to_vector<double>(),
                reference.groups()[gi].params[0].tensor.to_vector<double>())
          << gi;
    uploaded.step();  // uploads lr 7: now the steps differ
    reference.step();
    EXPECT_NE(uploaded.groups()[1].params[0].tensor.to_vector<double>(),
              reference.groups()[1].params[0].tensor.to_vector<double>());
    EXPECT_EQ(uploaded.groups()[0].params[0].tensor.to_vector<double>(),
              reference.groups()[0].params[0].tensor.to_vector<double>());
  }
}

// A set skip flag leaves parameters, optimizer state and Adam's step counts as they were; the
// next unskipped step continues from there as if the skipped one never happened.
TEST(Optimizer, SkippedStepChangesNothing) {
  for (OptimizerKind kind :
       {OptimizerKind::SGD, OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::RMSProp}) {
    SCOPED_TRACE(optimizer_kind_name(kind));
    Optimizer skipped(kind, three_groups(0.01, 0.9, 0.1));
    Optimizer plain(kind, three_groups(0.01, 0.9, 0.1));
    const Tensor skip = Tensor::ones({1}), go = Tensor::zeros({1});
    skipped.step(go);
    plain.step();
    std::vector<std::vector<double>> before;
    for (const auto& [name, t] : skipped.state_tensors()) before.push_back(t.to_double_vector());
    const std::vector<double> p_before = skipped.parameters()[1].to_vector<double>();
    skipped.step(skip);
    EXPECT_EQ(skipped.parameters()[1].to_vector<double>(), p_before);
    const auto state = skipped.state_tensors();
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_EQ(state[i].second.to_double_vector(), before[i]) << state[i].first;
    skipped.step(go);
    plain.step();
    const auto want = plain.state_tensors();
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_EQ(state[i].second.to_double_vector(), want[i].second.to_double_vector())
          << state[i].first;
    for (size_t k = 0; k < 3; ++k)
      EXPECT_EQ(skipped.parameters()[k].to_vector<double>(), plain.parameters()[k].to_vector<double>());
  }
}

// Adam's counts are per parameter: a parameter without a gradient keeps its count, and a count
// written through state_tensors() (as a checkpoint restores it) is the one the kernel uses.
TEST(Optimizer, AdamStepCountsPerParameter) {
  auto groups = three_groups(0.01, 0.9, 0.0);
  groups[2].params[0].tensor.set_grad(Tensor());
  Optimizer opt(OptimizerKind::Adam, groups);
  opt.step();
  opt.step();
  auto count = [&](int gi) { return opt.state_tensors()[3 * gi + 2].second.item(); };
  EXPECT_EQ(count(0), 2.0);
  EXPECT_EQ(count(1), 2.0);
  EXPECT_EQ(count(2), 0.0);  // no gradient: left alone
  EXPECT_EQ(opt.state_tensors()[2].second.dim(), 0);
  EXPECT_EQ(opt.state_tensors()[2].second.dtype(), DType::I64);

  // Restore group 0's count to 9: its next step uses t = 10, group 1's t = 3.
  opt.state_tensors()[2].second.copy_(Tensor::scalar(9, DType::I64));
  const std::vector<double> m0 = opt.state_tensors()[0].second.to_vector<double>();
  const std::vector<double> v0 = opt.state_tensors()[1].second.to_vector<double>();
  const double p0 = opt.groups()[0].params[0].tensor.to_vector<double>()[0];
  opt.step();
  EXPECT_EQ(count(0), 10.0);
  EXPECT_EQ(count(1), 3.0);
  const double b1 = 0.9, b2 = 0.999, g = 0.5;
  const double m = m0[0] + (1 - b1) * (g - m0[0]), v = v0[0] * b2 + (1 - b2) * g * g;
  const double want = p0 - 0.01 / (1 - std::pow(b1, 10)) * (m / (std::sqrt(v) / std::sqrt(1 - std::pow(b2, 10)) + 1e-8));
  EXPECT_NEAR(opt.groups()[0].params[0].tensor.to_vector<double>()[0], want, 1e-15);
}

// What a CUDA graph's address check reads: every state tensor's memory, the step counts and the
// uploaded hyperparameters, unchanged by steps and restores (they work in place).
TEST(Optimizer, StateAddressesCoverTheStateAndStayPut) {
  for (OptimizerKind kind : {OptimizerKind::SGD, OptimizerKind::Adam}) {
    Optimizer opt(kind, three_groups(0.01, 0.9, 0.0));
    opt.step();
    const std::vector<const void*> before = opt.state_addresses();
    for (const auto& [name, t] : opt.state_tensors()) {
      const void* p = t.data_ptr();
      // A conv-weight view or a count's element: its memory lies in a listed tensor.
      const bool listed = std::find(before.begin(), before.end(), p) != before.end() ||
                          ends_with(name, ".step");
      EXPECT_TRUE(listed) << name;
    }
    EXPECT_NE(std::find(before.begin(), before.end(), opt.device_hyper().data_ptr()), before.end());
    opt.state_tensors()[0].second.fill_(0.0);  // a restore writes in place
    opt.step();
    opt.step();
    EXPECT_EQ(opt.state_addresses(), before);
  }
}

TEST(Optimizer, AdamAndAdamWByHand) {
  for (OptimizerKind kind : {OptimizerKind::Adam, OptimizerKind::AdamW}) {
    const double lr = 0.01, b1 = 0.937, wd = 0.1;
    Optimizer opt(kind, three_groups(lr, b1, wd));
    opt.step();
    // Step 1: m̂ = g, v̂ = g², p -= lr g / (|g| + eps) after the decay (Adam: g += wd p; AdamW:
    // p *= 1 - lr wd).
    for (int gi = 0; gi < 3; ++gi) {
      const double decay = gi == 1 ? wd : 0.0;
      double p = 1.0, g = 0.5;
      if (kind == OptimizerKind::AdamW) p *= 1 - lr * decay;
      else g += decay * p;
      p -= lr * g / (std::abs(g) + 1e-8);
      EXPECT_NEAR(opt.groups()[gi].params[0].tensor.to_vector<double>()[0], p, 1e-14)
          << optimizer_kind_name(kind) << " group " << gi;
    }
    auto state = opt.state_tensors();
    ASSERT_EQ(state.size(), 9u);
    EXPECT_EQ(state[0].first, "p0.exp_avg");
    EXPECT_EQ(state[2].first, "p0.step");
    EXPECT_EQ(state[2].second.item(), 1.0);
    EXPECT_NEAR(state[0].second.to_vector<double>()[0], (1 - b1) * 0.5, 1e-15);
    EXPECT_NEAR(state[1].second.to_vector<double>()[0], 0.001 * 0.25, 1e-15);
  }
}

// torch.optim.RMSprop(lr, momentum, alpha=0.99, eps=1e-8, centered=False, weight_decay) by hand,
// two steps: g += wd p; sq = 0.99 sq + 0.01 g²; avg = sqrt(sq) + 1e-8;
// buf = momentum buf + g / avg; p -= lr buf (momentum 0: p -= lr g / avg, no buffer).
TEST(Optimizer, RmspropByHand) {
  for (double momentum : {0.9, 0.0}) {
    SCOPED_TRACE(momentum);
    const double lr = 0.01, wd = 0.1, alpha = 0.99, eps = 1e-8;
    Optimizer opt(OptimizerKind::RMSProp, three_groups(lr, momentum, wd));
    EXPECT_TRUE(opt.has_momentum());
    opt.step();
    opt.step();
    for (int gi = 0; gi < 3; ++gi) {
      const double decay = gi == 1 ? wd : 0.0;
      for (int i = 0; i < 2; ++i) {
        double p = i == 0 ? 1.0 : -2.0, sq = 0, buf = 0;
        for (int step = 0; step < 2; ++step) {
          const double g = (i == 0 ? 0.5 : 0.25) + decay * p;
          sq = alpha * sq + (1 - alpha) * g * g;
          const double avg = std::sqrt(sq) + eps;
          if (momentum > 0) {
            buf = momentum * buf + g / avg;
            p -= lr * buf;
          } else {
            p -= lr * g / avg;
          }
        }
        EXPECT_NEAR(opt.groups()[gi].params[0].tensor.to_vector<double>()[i], p, 1e-14)
            << "group " << gi << " element " << i;
        const auto state = opt.state_tensors();
        ASSERT_EQ(state.size(), 9u);
        EXPECT_NEAR(state[3 * gi].second.to_vector<double>()[i], sq, 1e-16);
        EXPECT_NEAR(state[3 * gi + 1].second.to_vector<double>()[i], buf, 1e-12);
        EXPECT_EQ(state[3 * gi + 2].second.item(), 2.0);
      }
    }
    const auto state = opt.state_tensors();
    EXPECT_EQ(state[0].first, "p0.square_avg");
    EXPECT_EQ(state[1].first, "p0.momentum_buffer");
    EXPECT_EQ(state[2].first, "p0.step");
    EXPECT_EQ(state[2].second.dtype(), DType::I64);
  }
  const Optimizer rms(OptimizerKind::RMSProp, three_groups(0.01, 0.9, 0.1));
  EXPECT_EQ(rms.describe().rfind("RMSProp(lr=0.01)", 0), 0u);
}

// In float32 the CPU update rounds as the kernels' shared math (kernels/optim.h) prescribes: the
// same bits as the formula evaluated step by step in float.
TEST(Optimizer, RmspropFloat32RoundsStepByStep) {
  std::vector<ParamGroup> groups(1);
  groups[0].lr = groups[0].initial_lr = 0.01;
  groups[0].momentum = 0.9;
  groups[0].weight_decay = 5e-4;
  Tensor p = Tensor::from_vector<float>({0.3f, -1.7f}, {2}).set_requires_grad();
  p.set_grad(Tensor::from_vector<float>({0.02f, -0.5f}, {2}));
  groups[0].params.push_back({"w", p, false});
  Optimizer opt(OptimizerKind::RMSProp, groups);
  opt.step();
  const float wd = 5e-4f, a = 0.99f, oma = static_cast<float>(1.0 - 0.99);
  const std::vector<float> g0 = {0.02f, -0.5f}, p0 = {0.3f, -1.7f};
  for (int i = 0; i < 2; ++i) {
    const float g = g0[i] + wd * p0[i];
    const float sq = 0.0f * a + oma * (g * g);
    const float avg = std::sqrt(sq) + 1e-8f;
    const float buf = 0.0f * 0.9f + g / avg;
    EXPECT_EQ(p.to_vector<float>()[i], p0[i] + -0.01f * buf) << i;
  }
}

TEST(Optimizer, ClipGradNormAsTorch) {
  Tensor a = param({3.0, 4.0}), b = param({12.0}), c = param({7.0});
  a.set_grad(Tensor::from_vector<double>({3.0, 4.0}, {2}));
  b.set_grad(Tensor::from_vector<double>({12.0}, {1}));  // c has no gradient: skipped
  EXPECT_DOUBLE_EQ(grad_norm({a, b, c}).item(), 13.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 20.0).item(), 13.0);
  EXPECT_EQ(b.grad().item(), 12.0);  // under the limit: unchanged
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 10.0).item(), 13.0);
  const double coef = 10.0 / (13.0 + 1e-6);
  EXPECT_DOUBLE_EQ(b.grad().item(), 12.0 * coef);
  EXPECT_DOUBLE_EQ(a.grad().to_vector<double>()[1], 4.0 * coef);
  EXPECT_NEAR(grad_norm({a, b}).item(), 10.0, 1e-5);
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}

TEST(Optimizer, ClipInFloat32RoundsAsTorch) {
  Tensor a = Tensor::from_vector<float>({30.0f, 40.0f}, {2}).set_requires_grad();
  a.set_grad(Tensor::from_vector<float>({30.0f, 40.0f}, {2}));
  clip_grad_norm({a}, 10.0);
  const float coef = 10.0f / (50.0f + 1e-6f);
  EXPECT_EQ(a.grad().to_vector<float>()[0], 30.0f * coef);
}

TEST(Optimizer, BadInputIsRefused) {
  EXPECT_EQ(parse_optimizer_kind("AdamW"), OptimizerKind::AdamW);
  EXPECT_EQ(parse_optimizer_kind("RMSProp"), OptimizerKind::RMSProp);
  EXPECT_STREQ(optimizer_kind_name(OptimizerKind::RMSProp), "RMSProp");
  EXPECT_THROW(parse_optimizer_kind("RMSprop"), Error);  // the reference's spelling only
  EXPECT_THROW(parse_optimizer_kind("sgd"), Error);
  auto groups = three_groups(0.1, 0.9, 0.0);
  groups[1].params.push_back(groups[0].params[0]);  // one parameter in two groups
  EXPECT_THROW(Optimizer(OptimizerKind::SGD, groups), Error);
  auto g2 = three_groups(0.1, 0.9, 0.0);
  g2[0].params[0].tensor.set_grad(Tensor::zeros({3}, DType::F64));  // wrong shape
  Optimizer opt(OptimizerKind::SGD, g2);
  EXPECT_THROW(opt.step(), Error);
}
