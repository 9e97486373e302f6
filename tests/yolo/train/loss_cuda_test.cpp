// ComputeLoss on CUDA against the CPU reference (loss_test.cpp checks the CPU against the naive
// reference and finite differences).
// Tolerances: float32 predictions are computed with the same float formulas on both sides; only
// expf/log1pf/atanf differ by an ulp or two between the host's libm and CUDA, and the sums are
// float64 on both (CUDA in a different but fixed order), so the loss agrees to ~1e-6 relative;
// a gradient element can lose digits where terms cancel (nvcc also fuses multiply-adds), so
// gradients are compared to 1e-3 relative plus 1e-5 of the level's largest gradient. bfloat16 predictions are rounded identically before
// both runs, but CUDA also rounds the objectness targets to bfloat16 (as the reference's tobj in
// the predictions' dtype) and writes bfloat16 gradients (8 bits of mantissa): 1e-2 relative on the
// loss and 2^-6 of the largest gradient on the gradients.
#include <cmath>

#include "engine/ops/elementwise.h"
#include "engine/random.h"
#include "kernels/yolo_loss.h"
#include "tests/support/testing.h"
#include "yolo/train/loss.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

std::shared_ptr<layers::Detect> make_detect(int64_t nc) {
  Generator gen(3);
  auto d = std::make_shared<layers::Detect>(
      nc, std::vector<std::vector<double>>{{10, 13, 16, 30, 33, 23}, {30, 61, 62, 45, 59, 119},
                                           {116, 90, 156, 198, 373, 326}},
      std::vector<int64_t>{4, 4, 4}, gen);
  d->set_strides({8, 16, 32});
  return d;
}

// bs images of img x img, nc classes: random predictions and per image ~12 random targets plus
// border, edge and duplicate-cell rows.
struct Problem {
  std::shared_ptr<layers::Detect> detect;
  std::vector<Tensor> preds;  // CPU float32
  Tensor targets;             // CPU float32

  Problem(int64_t bs, int64_t img, int64_t nc, uint64_t seed) : detect(make_detect(nc)) {
    for (int l = 0; l < 3; ++l) {
      const int64_t g = img / (8 << l);
      preds.push_back(random_tensor({bs, 3, g, g, nc + 5}, seed + l, DType::F32, -3, 3));
    }
    std::vector<double> u = random_tensor({bs * 12, 6}, seed + 7, DType::F64, 0, 1).to_vector<double>();
    std::vector<float> rows;
    for (int64_t i = 0; i < bs * 12; ++i) {
      const double* r = &u[6 * i];
      rows.insert(rows.end(), {float(i % bs), float(int64_t(r[1] * nc) % nc), float(r[2]), float(r[3]),
                               float(0.02 + 0.5 * r[4] * r[4]), float(0.02 + 0.5 * r[5] * r[5])});
    }
    const std::vector<float> edges = {0, 0, 1.0f, 0.5f, 0.2f, 0.3f,  0, 1, 0.0f, 0.0f, 0.1f, 0.1f,
                                      0, 2, 0.5f, 0.5f, 0.3f, 0.3f,  0, 0, 0.51f, 0.51f, 0.3f, 0.25f};
    rows.insert(rows.end(), edges.begin(), edges.end());
    targets = Tensor::from_vector(rows, {static_cast<int64_t>(rows.size() / 6), 6});
  }
};

struct LossRun {
  LossResult result;
  std::vector<Tensor> grads;  // on the CPU, float32
};

LossRun run(const ComputeLoss& loss, const std::vector<Tensor>& preds_in, const Tensor& targets,
        Device device, DType dtype, double grad_scale = 1.0) {
  std::vector<Tensor> preds;
  for (const Tensor& p : preds_in) preds.push_back(p.detach().to(dtype).to(device).set_requires_grad());
  LossRun r{loss(preds, targets), {}};
  Tensor root = grad_scale == 1.0 ? r.result.total : ops::mul(r.result.total, grad_scale);
  root.backward();
  for (const Tensor& p : preds) r.grads.push_back(p.grad().to(Device::cpu()).to(DType::F32));
  return r;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_double_vector()) m = std::max(m, std::abs(v));
  return m;
}

void expect_parity(const LossRun& gpu, const LossRun& cpu, double loss_rtol, double grad_rtol, double grad_atol_share) {
  EXPECT_NEAR(gpu.result.box, cpu.result.box, loss_rtol * cpu.result.box);
  EXPECT_NEAR(gpu.result.obj, cpu.result.obj, loss_rtol * cpu.result.obj);
  EXPECT_NEAR(gpu.result.cls, cpu.result.cls, loss_rtol * cpu.result.cls);
  const double total = gpu.result.total.to(Device::cpu()).item();
  EXPECT_NEAR(total, cpu.result.total.item(), loss_rtol * cpu.result.total.item());
  for (size_t l = 0; l < cpu.grads.size(); ++l)
    EXPECT_TRUE(all_close(gpu.grads[l], cpu.grads[l], grad_atol_share * max_abs(cpu.grads[l]), grad_rtol))
        << "level " << l;
}

}  // namespace

TEST(YoloLossCuda, Float32MatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(4, 256, 80, 11);
  Hyp h = scale_loss_hyp(Hyp{}, 3, 80, 256);
  ComputeLoss loss(*pr.detect, h);
  const LossRun cpu = run(loss, pr.preds, pr.targets, Device::cpu(), DType::F32);
  // Targets on the device and on the host give the same result.
  const LossRun gpu = run(loss, pr.preds, pr.targets.to(Device::cuda(0)), Device::cuda(0), DType::F32);
  const LossRun gpu_host_targets = run(loss, pr.preds, pr.targets, Device::cuda(0), DType::F32);
  EXPECT_GT(cpu.result.box, 0);
  EXPECT_GT(cpu.result.cls, 0);
  EXPECT_EQ(gpu.result.total.device(), Device::cuda(0));
  expect_parity(gpu, cpu, 1e-5, 1e-3, 1e-5);
  expect_parity(gpu_host_targets, cpu, 1e-5, 1e-3, 1e-5);
}

// Targets padded as the trainer pads them on a GPU (pad_targets): the device loss matches the
// unpadded CPU loss as closely as unpadded targets do, and reports no invalid row (the padding
// rows' image index -1 is not invalid); the CPU proves padded == unpadded bit for bit (loss_test).
TEST(YoloLossCuda, PaddedTargetsMatchTheUnpaddedLoss) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(4, 256, 80, 13);
  ComputeLoss loss(*pr.detect, scale_loss_hyp(Hyp{}, 3, 80, 256));
  const Tensor padded = pad_targets(pr.targets, padded_target_rows(pr.targets.size(0)));
  ASSERT_GT(padded.size(0), pr.targets.size(0));
  const LossRun cpu = run(loss, pr.preds, pr.targets, Device::cpu(), DType::F32);
  const LossRun gpu = run(loss, pr.preds, padded.to(Device::cuda(0)), Device::cuda(0), DType::F32);
  expect_parity(gpu, cpu, 1e-5, 1e-3, 1e-5);
  std::vector<Tensor> preds;
  for (const Tensor& p : pr.preds) preds.push_back(p.to(Device::cuda(0)));
  const DeviceLoss dl = loss.forward(preds, padded.to(Device::cuda(0)));
  EXPECT_EQ(dl.summary.to(Device::cpu()).to_vector<double>()[kernels::kSummaryBadRow], -1.0);
}

TEST(YoloLossCuda, FocalSmoothingPosWeightsAndScaledGradient) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(2, 128, 5, 21);
  Hyp h;
  h.fl_gamma = 1.5;
  h.label_smoothing = 0.1;
  h.cls_pw = 1.3;
  h.obj_pw = 0.8;
  ComputeLoss loss(*pr.detect, h);
  // A loss scale (as fp16 training uses) reaches the kernels through the incoming gradient.
  const LossRun cpu = run(loss, pr.preds, pr.targets, Device::cpu(), DType::F32, 1024.0);
  const LossRun gpu = run(loss, pr.preds, pr.targets, Device::cuda(0), DType::F32, 1024.0);
  expect_parity(gpu, cpu, 1e-5, 1e-3, 1e-5);
}

TEST(YoloLossCuda, BFloat16WithinRounding) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(2, 128, 80, 31);
  ComputeLoss loss(*pr.detect, Hyp{});
  std::vector<Tensor> rounded;
  for (const Tensor& p : pr.preds) rounded.push_back(p.to(DType::BF16).to(DType::F32));
  const LossRun cpu = run(loss, rounded, pr.targets, Device::cpu(), DType::F32);
  const LossRun gpu = run(loss, rounded, pr.targets, Device::cuda(0), DType::BF16);
  EXPECT_EQ(gpu.result.total.dtype(), DType::F32);
  expect_parity(gpu, cpu, 1e-2, 1.0 / 64, 1.0 / 64);
}

// float16 predictions as fp16 training gives them: 11 mantissa bits, so 2^-11 per rounding of
// the objectness targets and of the gradients; scaled by 1024 as the loss scaler does, which
// keeps small gradients out of float16's subnormals. 2e-3 relative on the loss, 2^-9 of the
// largest gradient on the gradients (divided back by the scale).
TEST(YoloLossCuda, Float16WithinRoundingUnderLossScaling) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(2, 128, 80, 41);
  ComputeLoss loss(*pr.detect, Hyp{});
  std::vector<Tensor> rounded;
  for (const Tensor& p : pr.preds) rounded.push_back(p.to(DType::F16).to(DType::F32));
  const LossRun cpu = run(loss, rounded, pr.targets, Device::cpu(), DType::F32, 1024.0);
  LossRun gpu = run(loss, rounded, pr.targets, Device::cuda(0), DType::F16, 1024.0);
  EXPECT_EQ(gpu.result.total.dtype(), DType::F32);
  expect_parity(gpu, cpu, 2e-3, 1.0 / 512, 1.0 / 512);
  // The device form of the same loss: the summary holds the components the host read.
  std::vector<Tensor> preds;
  for (const Tensor& p : rounded) preds.push_back(p.to(DType::F16).to(Device::cuda(0)));
  const DeviceLoss dl = loss.forward(preds, pr.targets.to(Device::cuda(0)));
  const std::vector<double> sm = dl.summary.to(Device::cpu()).to_vector<double>();
  EXPECT_EQ(sm[kernels::kSummaryBox], gpu.result.box);
  EXPECT_EQ(sm[kernels::kSummaryObj], gpu.result.obj);
  EXPECT_EQ(sm[kernels::kSummaryCls], gpu.result.cls);
  EXPECT_EQ(sm[kernels::kSummaryBadRow], -1.0);
}

TEST(YoloLossCuda, DeterministicRunToRun) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(4, 256, 80, 41);
  ComputeLoss loss(*pr.detect, Hyp{});
  const LossRun a = run(loss, pr.preds, pr.targets, Device::cuda(0), DType::F32);
  const LossRun b = run(loss, pr.preds, pr.targets, Device::cuda(0), DType::F32);
  EXPECT_EQ(a.result.box, b.result.box);
  EXPECT_EQ(a.result.obj, b.result.obj);
  EXPECT_EQ(a.result.cls, b.result.cls);
  for (size_t l = 0; l < a.grads.size(); ++l)
    EXPECT_TRUE(all_close(a.grads[l], b.grads[l], 0, 0)) << "level " << l;
}

TEST(YoloLossCuda, EmptyTargetsAndBadRows) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Problem pr(2, 64, 3, 51);
  ComputeLoss loss(*pr.detect, Hyp{});
  const Tensor none = Tensor::zeros({0, 6});
  const LossRun cpu = run(loss, pr.preds, none, Device::cpu(), DType::F32);
  const LossRun gpu = run(loss, pr.preds, none.to(Device::cuda(0)), Device::cuda(0), DType::F32);
  EXPECT_EQ(gpu.result.box, 0.0);
  EXPECT_EQ(gpu.result.cls, 0.0);
  expect_parity(gpu, cpu, 1e-5, 1e-3, 1e-5);

  std::vector<Tensor> dev;
  for (const Tensor& p : pr.preds) dev.push_back(p.to(Device::cuda(0)));
  const Tensor bad = Tensor::from_vector(std::vector<float>{0, 0, 0.5f, 0.5f, 0.1f, 0.1f,
                                                            5, 0, 0.5f, 0.5f, 0.1f, 0.1f}, {2, 6});
  try {
    loss(dev, bad.to(Device::cuda(0)));
    FAIL() << "image index 5 of a batch of 2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target row 1"), std::string::npos) << e.what();
  }
}
