// The CPU multi-tensor optimizer kernels against hand-computed values (float64, so the only
// differences are roundings of the formulas, < 1e-14), the textbook forms of the updates, and
// the host-value math they replaced: per-step values (lr, momentum / beta1, Adam's step counts,
// the EMA's update count) are read from memory when the kernel runs, and the updates must equal
// those computed from the same values passed as host arguments, bit for bit in float32.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/optim.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kernels::AdamCoef;
using kernels::GroupHyper;
using kernels::TensorList;
using kestrel::testing::random_tensor;

namespace {

Tensor vec(const std::vector<double>& v) {
  return Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

// --- the host-value reference: coefficients from host arguments, as before they moved to memory --
struct HostSgd {
  double lr, momentum, weight_decay;
  bool nesterov;
};
template <class T>
void reference_sgd(T* p, T* buf, const T* g, int64_t n, const HostSgd& h) {
  const kernels::SgdCoef<T> c{T(h.lr), T(h.momentum), T(h.weight_decay), h.nesterov};
  for (int64_t i = 0; i < n; ++i) kernels::sgd_update(p[i], buf[i], g[i], c);
}

struct HostAdam {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  int64_t step;  // the step being taken, >= 1
};
AdamCoef<double> reference_adam_coef(const HostAdam& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  return {1.0 - h.beta1, h.beta2,       1.0 - h.beta2,           h.eps,      h.weight_decay,
          h.lr / bc1,    std::sqrt(bc2), 1.0 - h.lr * h.weight_decay, h.decoupled};
}
template <class T>
void reference_adam(T* p, T* m, T* v, const T* g, int64_t n, const HostAdam& h) {
  const AdamCoef<T> c = kernels::cast_coef<T>(reference_adam_coef(h));
  for (int64_t i = 0; i < n; ++i) kernels::adam_update(p[i], m[i], v[i], g[i], c);
}

// Column d of tensor k as a float pointer.
float* fp(const std::vector<std::vector<Tensor>>& cols, int d, size_t k) {
  return cols[d][k].data<float>();
}

// `depth` columns of float32 tensors of a few sizes (the last column non-negative: Adam's v).
std::vector<std::vector<Tensor>> columns(int depth, uint64_t seed) {
  const std::vector<int64_t> sizes = {1, 7, 300, 0, 1000};
  std::vector<std::vector<Tensor>> cols(depth);
  for (int d = 0; d < depth; ++d)
    for (size_t k = 0; k < sizes.size(); ++k)
      cols[d].push_back(random_tensor({sizes[k]}, seed * 100 + d * 10 + k, DType::F32,
                                      d == 3 ? 0.0 : -1.0, 1.0));
  return cols;
}

std::vector<std::vector<Tensor>> clone(const std::vector<std::vector<Tensor>>& cols) {
  std::vector<std::vector<Tensor>> out(cols.size());
  for (size_t d = 0; d < cols.size(); ++d)
    for (const Tensor& t : cols[d]) out[d].push_back(t.clone());
  return out;
}

TensorList list_of(const std::vector<std::vector<Tensor>>& cols, std::vector<int64_t>* counts = nullptr) {
  TensorList list(static_cast<int>(cols.size()));
  for (size_t k = 0; k < cols[0].size(); ++k) {
    std::array<void*, 4> p{};
    for (size_t c = 0; c < cols.size(); ++c) p[c] = cols[c][k].data_ptr();
    int64_t* count = counts ? &(*counts)[k] : nullptr;
    const int64_t n = cols[0][k].numel();
    switch (cols.size()) {
      case 2: list.add({p[0], p[1]}, n, count); break;
      case 3: list.add({p[0], p[1], p[2]}, n, count); break;
      default: list.add({p[0], p[1], p[2], p[3]}, n, count);
    }
  }
  return list;
}

}  // namespace

TEST(OptimKernels, SgdNesterovWithWeightDecayByHand) {
  Tensor p = vec({1.0, -2.0}), g = vec({0.5, 0.25}), buf = vec({0.2, 0.0});
  TensorList list(3);
  list.add({p.data_ptr(), g.data_ptr(), buf.data_ptr()}, 2);
  const GroupHyper h{0.1, 0.9};
  kernels::sgd_step_cpu(DType::F64, list, &h, {0.01, true});
  // d = g + wd p; buf = 0.9 buf + d; p -= lr (d + 0.9 buf)
  const double d0 = 0.5 + 0.01 * 1.0, b0 = 0.9 * 0.2 + d0;
  const double d1 = 0.25 + 0.01 * -2.0, b1 = d1;
  EXPECT_NEAR(buf.to_vector<double>()[0], b0, 1e-15);
  EXPECT_NEAR(buf.to_vector<double>()[1], b1, 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[0], 1.0 - 0.1 * (d0 + 0.9 * b0), 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[1], -2.0 - 0.1 * (d1 + 0.9 * b1), 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[0], 0.8869, 1e-14);  // 1 - 0.1 * (0.51 + 0.9 * 0.69)
}

TEST(OptimKernels, SgdPlainMomentumWithoutDecay) {
  Tensor p = vec({1.0}), g = vec({0.5}), buf = vec({0.2});
  TensorList list(3);
  list.add({p.data_ptr(), g.data_ptr(), buf.data_ptr()}, 1);
  const GroupHyper h{0.1, 0.9};
  kernels::sgd_step_cpu(DType::F64, list, &h, {0.0, false});
  EXPECT_NEAR(buf.item(), 0.68, 1e-15);
  EXPECT_NEAR(p.item(), 1.0 - 0.068, 1e-15);
}

// Adam in its textbook form: bias-corrected moments, p -= lr m̂ / (sqrt(v̂) + eps).
void textbook_adam(double& p, double& m, double& v, double g, double lr, double b1, double b2,
                   double eps, double wd, bool decoupled, int t) {
  if (decoupled) p *= 1 - lr * wd;
  else g += wd * p;
  m = b1 * m + (1 - b1) * g;
  v = b2 * v + (1 - b2) * g * g;
  const double mh = m / (1 - std::pow(b1, t)), vh = v / (1 - std::pow(b2, t));
  p -= lr * mh / (std::sqrt(vh) + eps);
}

class AdamKernel : public ::testing::TestWithParam<bool> {};

TEST_P(AdamKernel, ThreeStepsMatchTextbookForm) {
  const bool decoupled = GetParam();
  const double lr = 0.01, b1 = 0.937, b2 = 0.999, eps = 1e-8, wd = 0.05;
  Tensor p = vec({0.5, -1.5, 2.0}), m = vec({0, 0, 0}), v = vec({0, 0, 0});
  std::vector<double> ep = p.to_vector<double>(), em(3, 0.0), ev(3, 0.0);
  const double grads[3][3] = {{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.0, 0.2}};
  const GroupHyper h{lr, b1};
  int64_t count = 0;
  for (int t = 1; t <= 3; ++t) {
    Tensor g = vec({grads[t - 1][0], grads[t - 1][1], grads[t - 1][2]});
    TensorList list(4);
    list.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 3, &count);
    kernels::adam_step_cpu(DType::F64, list, &h, {b2, eps, wd, decoupled});
    EXPECT_EQ(count, t);
    for (int i = 0; i < 3; ++i)
      textbook_adam(ep[i], em[i], ev[i], grads[t - 1][i], lr, b1, b2, eps, wd, decoupled, t);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(p.to_vector<double>()[i], ep[i], 1e-13) << i;
    EXPECT_NEAR(m.to_vector<double>()[i], em[i], 1e-15) << i;
    EXPECT_NEAR(v.to_vector<double>()[i], ev[i], 1e-15) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AdamAndAdamW, AdamKernel, ::testing::Values(false, true));

TEST(OptimKernels, AdamFirstStepMovesByLr) {
  // With zero moments, step 1 moves every element by lr * g / (|g| + eps) ≈ lr * sign(g).
  Tensor p = vec({0.0, 0.0}), g = vec({3.0, -0.001}), m = vec({0, 0}), v = vec({0, 0});
  int64_t count = 0;
  TensorList list(4);
  list.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 2, &count);
  const GroupHyper h{0.001, 0.9};
  kernels::adam_step_cpu(DType::F64, list, &h, {0.999, 1e-8, 0.0, false});
  EXPECT_NEAR(p.to_vector<double>()[0], -0.001, 1e-11);
  EXPECT_NEAR(p.to_vector<double>()[1], 0.001, 1e-8);
  count = -1;  // a count is never negative
  EXPECT_THROW(kernels::adam_step_cpu(DType::F64, list, &h, {0.999, 1e-8, 0.0, false}), Error);
  TensorList uncounted(4);
  uncounted.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 2);
  EXPECT_THROW(kernels::adam_step_cpu(DType::F64, uncounted, &h, {0.999, 1e-8, 0.0, false}),
               Error);
  EXPECT_THROW(kernels::adam_step_cpu(DType::F64, list, nullptr, {0.999, 1e-8, 0.0, false}),
               Error);
}

// The values in memory, changed between steps, give exactly the host-value updates: SGD (Nesterov
// and plain), Adam and AdamW in float32 over several tensors, lr and momentum moving as warmup
// moves them.
TEST(OptimKernels, HyperInMemoryEqualsHostValueMathBitwise) {
  auto got = columns(3, 1);
  auto want = clone(got);
  GroupHyper h{};
  for (int step = 0; step < 4; ++step) {
    h = {0.1 / (step + 1), 0.8 + 0.03 * step};
    const bool nesterov = step % 2 == 0;
    kernels::sgd_step_cpu(DType::F32, list_of(got), &h, {5e-4, nesterov});
    for (size_t k = 0; k < want[0].size(); ++k)
      reference_sgd(fp(want, 0, k), fp(want, 2, k), fp(want, 1, k), want[0][k].numel(),
                    {h.lr, h.momentum, 5e-4, nesterov});
  }
  for (int d : {0, 2})
    for (size_t k = 0; k < got[d].size(); ++k) EXPECT_TRUE(same_bits(got[d][k], want[d][k])) << k;

  for (bool decoupled : {false, true}) {
    auto a = columns(4, 2);
    auto b = clone(a);
    std::vector<int64_t> counts(a[0].size(), 0);
    for (int step = 1; step <= 4; ++step) {
      h = {1e-3 * step, 0.9 + 0.01 * step};
      kernels::adam_step_cpu(DType::F32, list_of(a, &counts), &h, {0.999, 1e-8, 5e-4, decoupled});
      for (size_t k = 0; k < b[0].size(); ++k)
        reference_adam(fp(b, 0, k), fp(b, 2, k), fp(b, 3, k), fp(b, 1, k), b[0][k].numel(),
                       {h.lr, h.momentum, 0.999, 1e-8, 5e-4, decoupled, step});
    }
    for (int64_t c : counts) EXPECT_EQ(c, 4);
    for (int d : {0, 2, 3})
      for (size_t k = 0; k < a[d].size(); ++k)
        EXPECT_TRUE(same_bits(a[d][k], b[d][k])) << "AdamW " << decoupled << " column " << d << " " << k;
  }
}

// The shared coefficient function is the host-value math exactly, at every count 1..N.
TEST(OptimKernels, AdamBiasCorrectionAtCountsOneToN) {
  const GroupHyper h{0.01, 0.937};
  const kernels::AdamConfig cfg{0.999, 1e-8, 5e-4, true};
  for (int64_t t = 1; t <= 3000; t += (t < 20 ? 1 : 97)) {
    const AdamCoef<double> got = kernels::adam_coef(h, cfg, t);
    const AdamCoef<double> want = reference_adam_coef({0.01, 0.937, 0.999, 1e-8, 5e-4, true, t});
    EXPECT_EQ(got.step_size, want.step_size) << t;
    EXPECT_EQ(got.bc2_sqrt, want.bc2_sqrt) << t;
    EXPECT_EQ(got.decay_factor, want.decay_factor) << t;
    EXPECT_EQ(got.one_minus_beta1, want.one_minus_beta1) << t;
    EXPECT_EQ(got.one_minus_beta2, want.one_minus_beta2) << t;
  }
  // Through the kernel: one element from count t - 1 moves as the reference's step t.
  for (int64_t t = 1; t <= 12; ++t) {
    Tensor p = Tensor::from_vector<float>({0.25f}, {1}), g = Tensor::from_vector<float>({0.5f}, {1});
    Tensor m = Tensor::from_vector<float>({0.1f}, {1}), v = Tensor::from_vector<float>({0.02f}, {1});
    float rp = 0.25f, rg = 0.5f, rm = 0.1f, rv = 0.02f;
    int64_t count = t - 1;
    TensorList list(4);
    list.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 1, &count);
    kernels::adam_step_cpu(DType::F32, list, &h, {0.999, 1e-8, 0.0, false});
    reference_adam(&rp, &rm, &rv, &rg, 1, {0.01, 0.937, 0.999, 1e-8, 0.0, false, t});
    EXPECT_EQ(p.item(), static_cast<double>(rp)) << t;
    EXPECT_EQ(count, t);
  }
}

// Each tensor uses its own count (as PyTorch's per-parameter state['step']), and each advances.
TEST(OptimKernels, AdamCountsArePerTensor) {
  auto a = columns(4, 3);
  auto b = clone(a);
  std::vector<int64_t> counts = {0, 5, 1, 0, 40};
  const GroupHyper h{1e-3, 0.937};
  kernels::adam_step_cpu(DType::F32, list_of(a, &counts), &h, {0.999, 1e-8, 0.0, false});
  const std::vector<int64_t> before = {0, 5, 1, 0, 40};
  for (size_t k = 0; k < b[0].size(); ++k) {
    EXPECT_EQ(counts[k], before[k] + 1) << k;
    reference_adam(fp(b, 0, k), fp(b, 2, k), fp(b, 3, k), fp(b, 1, k), b[0][k].numel(),
                   {1e-3, 0.937, 0.999, 1e-8, 0.0, false, before[k] + 1});
    EXPECT_TRUE(same_bits(a[0][k], b[0][k])) << k;
  }
}

TEST(OptimKernels, GlobalNormOverManyTensors) {
  Tensor a = vec({3.0, 4.0}), b = vec({12.0}), empty = vec({});
  TensorList list(1);
  list.add({a.data_ptr()}, 2);
  list.add({empty.data_ptr()}, 0);
  list.add({b.data_ptr()}, 1);
  EXPECT_DOUBLE_EQ(kernels::global_norm_cpu(DType::F64, list), 13.0);
  Tensor f = Tensor::from_vector<float>({1e20f, 1e20f}, {2});  // squares overflow float, not double
  TensorList lf(1);
  lf.add({f.data_ptr()}, 2);
  const double big = static_cast<double>(1e20f);
  EXPECT_NEAR(kernels::global_norm_cpu(DType::F32, lf), std::sqrt(2.0) * big, 1e-15 * big);
}

TEST(OptimKernels, ClipCoefficient) {
  EXPECT_FLOAT_EQ(kernels::clip_coef(20.0f, 10.0f), 10.0f / (20.0f + 1e-6f));
  EXPECT_EQ(kernels::clip_coef(5.0f, 10.0f), 1.0f);
  EXPECT_TRUE(std::isnan(kernels::clip_coef(std::nanf(""), 10.0f)));
  EXPECT_EQ(kernels::clip_coef(std::numeric_limits<float>::infinity(), 10.0f), 0.0f);
}

TEST(OptimKernels, ScaleFlagsNonFiniteInputs) {
  Tensor a = vec({1.0, -2.0}), b = vec({4.0});
  TensorList list(1);
  list.add({a.data_ptr()}, 2);
  list.add({b.data_ptr()}, 1);
  EXPECT_FALSE(kernels::scale_cpu(DType::F64, list, 0.5));
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(b.item(), 2.0);
  b.fill_(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(kernels::scale_cpu(DType::F64, list, 1.0));
  b.fill_(std::nan(""));
  EXPECT_TRUE(kernels::scale_cpu(DType::F64, list, 1.0));
}

TEST(OptimKernels, EmaDecayRampAndUpdateByHand) {
  const kernels::EmaRamp ramp{0.9999, 2000.0};
  for (int64_t n : {1, 2, 100, 2000, 10000})
    EXPECT_EQ(kernels::ema_decay(ramp, n), 0.9999 * (1.0 - std::exp(-static_cast<double>(n) / 2000.0)));
  Tensor e = Tensor::from_vector<float>({1.0f, 2.0f}, {2});
  Tensor m = Tensor::from_vector<float>({3.0f, -2.0f}, {2});
  TensorList list(2);
  list.add({e.data_ptr(), m.data_ptr()}, 2);
  int64_t updates = 1999;
  kernels::ema_update_cpu(DType::F32, list, ramp, &updates);
  EXPECT_EQ(updates, 2000);
  const double dd = 0.9999 * (1.0 - std::exp(-1.0));
  const float d = static_cast<float>(dd), omd = static_cast<float>(1.0 - dd);
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{1.0f * d + omd * 3.0f, 2.0f * d + omd * -2.0f}));
  // An empty list still counts the update.
  kernels::ema_update_cpu(DType::F32, TensorList(2), ramp, &updates);
  EXPECT_EQ(updates, 2001);
  updates = -1;
  EXPECT_THROW(kernels::ema_update_cpu(DType::F32, list, ramp, &updates), Error);
  EXPECT_THROW(kernels::ema_update_cpu(DType::F32, list, ramp, nullptr), Error);
}

TEST(OptimKernels, ZeroSetsEveryElementToPositiveZero) {
  Tensor a = Tensor::from_vector<float>({1.0f, -0.0f, NAN}, {3});
  Tensor b = vec({-3.0, 4.0});
  Tensor empty = vec({});
  TensorList fl(1), dl(1);
  fl.add({a.data_ptr()}, 3);
  fl.add({empty.data_ptr()}, 0);
  dl.add({b.data_ptr()}, 2);
  kernels::zero_cpu(DType::F32, fl);
  kernels::zero_cpu(DType::F64, dl);
  EXPECT_TRUE(same_bits(a, Tensor::zeros({3})));
  EXPECT_TRUE(same_bits(b, Tensor::zeros({2}, DType::F64)));
  EXPECT_FALSE(std::signbit(a.to_vector<float>()[1]));
  EXPECT_THROW(kernels::zero_cpu(DType::F32, TensorList(2)), Error);
}

TEST(OptimKernels, BadListsAreRefused) {
  Tensor a = vec({1.0});
  TensorList list(2);
  EXPECT_THROW(list.add({a.data_ptr()}, 1), Error);
  EXPECT_THROW(list.add({a.data_ptr(), a.data_ptr()}, -1), Error);
  TensorList one(1);
  one.add({a.data_ptr()}, 1);
  EXPECT_THROW(kernels::scale_cpu(DType::F16, one, 1.0), Error);  // CPU: float/double only
}

TEST(OptimKernels, LaunchPlanCoversEveryChunkOnceWithinTheLimits) {
  // An empty tensor, short tails, a tensor longer than one launch's blocks, and more tensors
  // than one launch holds (pointers are never read by the plan).
  std::vector<int64_t> sizes = {1000, 0, 1, kernels::kListChunk + 1, 3 * kernels::kListChunk,
                                (kernels::kMaxListBlocks + 10) * kernels::kListChunk + 7};
  for (int i = 0; i < 80; ++i) sizes.push_back(17 * i + 3);
  TensorList list(2);
  for (int64_t n : sizes) list.add({nullptr, nullptr}, n);

  std::vector<std::pair<int, int64_t>> want, got;
  for (size_t k = 0; k < sizes.size(); ++k)
    for (int64_t c = 0; c * kernels::kListChunk < sizes[k]; ++c) want.emplace_back(int(k), c);
  const std::vector<kernels::ListLaunch> plan = kernels::plan_list_launches(list);
  int64_t blocks = 0;
  for (const kernels::ListLaunch& l : plan) {
    EXPECT_EQ(l.first_block, blocks);
    EXPECT_LE(l.tensors.size(), size_t(kernels::kMaxListTensors));
    EXPECT_LE(l.block_tensor.size(), size_t(kernels::kMaxListBlocks));
    EXPECT_FALSE(l.block_tensor.empty());
    for (size_t b = 0; b < l.block_tensor.size(); ++b)
      got.emplace_back(l.tensors.at(l.block_tensor[b]), l.block_chunk[b]);
    blocks += static_cast<int64_t>(l.block_tensor.size());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(blocks, kernels::norm_partial_count(list));
  EXPECT_GE(plan.size(), 4u);  // the long tensor and the many short ones both split launches
  EXPECT_TRUE(kernels::plan_list_launches(TensorList(1)).empty());
}

// A set skip flag (a non-finite loss on some rank) leaves parameters, state and counts as they
// were; a clear one changes nothing about the update.
TEST(OptimKernels, SkipFlagLeavesEverythingUnchanged) {
  const float skip = 1.0f, go = 0.0f;
  Tensor p = vec({1.0, -2.0}), g = vec({0.5, 0.25}), buf = vec({0.2, 0.0});
  TensorList sgd(3);
  sgd.add({p.data_ptr(), g.data_ptr(), buf.data_ptr()}, 2);
  const GroupHyper sh{0.1, 0.9};
  kernels::sgd_step_cpu(DType::F64, sgd, &sh, {0.01, true}, &skip);
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(buf.to_vector<double>(), (std::vector<double>{0.2, 0.0}));
  kernels::sgd_step_cpu(DType::F64, sgd, &sh, {0.01, true}, &go);
  EXPECT_NEAR(p.to_vector<double>()[0], 0.8869, 1e-14);

  Tensor m = vec({0.1, 0.2}), v = vec({0.3, 0.4});
  int64_t count = 3;
  TensorList adam(4);
  adam.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 2, &count);
  const GroupHyper ah{1e-3, 0.9};
  const std::vector<double> p_before = p.to_vector<double>();
  kernels::adam_step_cpu(DType::F64, adam, &ah, {0.999, 1e-8, 0.0, false}, &skip);
  EXPECT_EQ(p.to_vector<double>(), p_before);
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{0.3, 0.4}));
  EXPECT_EQ(count, 3);
  kernels::adam_step_cpu(DType::F64, adam, &ah, {0.999, 1e-8, 0.0, false}, &go);
  EXPECT_EQ(count, 4);
  EXPECT_NE(p.to_vector<double>(), p_before);

  Tensor e = vec({1.0, 2.0}), model = vec({3.0, -2.0});
  TensorList ema(2);
  ema.add({e.data_ptr(), model.data_ptr()}, 2);
  const kernels::EmaRamp ramp{0.75, 1e-300};  // exp(-n / tau) = 0: d = 0.75 from the first update
  int64_t updates = 0;
  kernels::ema_update_cpu(DType::F64, ema, ramp, &updates, &skip);
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(updates, 0);
  kernels::ema_update_cpu(DType::F64, ema, ramp, &updates, &go);
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{1.5, 1.0}));
  EXPECT_EQ(updates, 1);
  EXPECT_FALSE(kernels::step_skipped(nullptr));
  EXPECT_FALSE(kernels::step_skipped(&go));
  EXPECT_TRUE(kernels::step_skipped(&skip));
}
