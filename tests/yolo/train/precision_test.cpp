// --amp: the precision a run picks on each device (yolo/train/device_choice.h), and a yolov5n training
// step with bfloat16 convolutions on the CPU against the float32 step.
#include <cmath>
#include <string>

#include "engine/ops/elementwise.h"
#include "kernels/bf16_operands.h"
#include "layers/conv.h"
#include "tests/yolo/train/train_step_rig.h"
#include "yolo/train/device_choice.h"

using namespace kestrel;
using namespace kestrel::yolo;
using namespace kestrel::yolo::testing;
using kestrel::testing::error_of;

namespace {

TEST(Precision, CpuDefaultsToFloat32) {
  for (AmpMode amp : {AmpMode::Auto, AmpMode::Off}) {
    const Precision p = pick_precision(amp, Device::cpu());
    EXPECT_EQ(p.activations, DType::F32) << amp_mode_name(amp);
    EXPECT_EQ(p.conv_operands, ops::ConvOperands::Float32) << amp_mode_name(amp);
  }
}

TEST(Precision, CpuBf16IsBfloat16ActivationsWhereTheCpuHasThemAndRefusedElsewhere) {
  if (kernels::cpu_bf16_support().native()) {
    const Precision p = pick_precision(AmpMode::Bf16, Device::cpu());
    EXPECT_EQ(p.activations, DType::BF16);
    EXPECT_EQ(p.conv_operands, ops::ConvOperands::Float32);
    EXPECT_EQ(p.describe(), "bfloat16");
    // Classification's choice: float32 activations, bfloat16 convolution operands.
    const Precision o = pick_precision(AmpMode::Bf16, Device::cpu(), CpuMixed::Operands);
    EXPECT_EQ(o.activations, DType::F32);
    EXPECT_EQ(o.conv_operands, ops::ConvOperands::Bfloat16);
    EXPECT_EQ(o.describe(), "float32 activations, bfloat16 convolutions");
    return;
  }
  const std::string e = error_of([] { pick_precision(AmpMode::Bf16, Device::cpu()); });
  EXPECT_NE(e.find("needs AVX-512 BF16 or AMX-BF16, which this CPU lacks"), std::string::npos) << e;
  EXPECT_NE(e.find("oneDNN has no bfloat16 convolution"), std::string::npos) << e;
  EXPECT_NE(e.find("--amp off"), std::string::npos) << e;
  EXPECT_NE(e.find("--amp bf16-emulated"), std::string::npos) << e;
}

TEST(Precision, CpuBf16EmulatedRunsAnywhere) {
  const Precision p = pick_precision(AmpMode::Bf16Emulated, Device::cpu());
  EXPECT_EQ(p.activations, DType::F32);
  EXPECT_EQ(p.conv_operands, ops::ConvOperands::Bfloat16Emulated);
  EXPECT_EQ(p.describe(), "float32 activations, bfloat16 convolutions (emulated in float32)");
}

TEST(Precision, BadChoicesAreRefusedClearly) {
  EXPECT_NE(error_of([] { pick_precision(AmpMode::Fp16, Device::cpu()); }).find("--amp fp16 needs a CUDA device"),
            std::string::npos);
  // An unknown spelling never reaches pick_precision: reading the option refuses it.
  for (const char* amp : {"fp32", "half"}) {
    try {
      parse_amp_mode(amp);
      ADD_FAILURE() << amp << " was accepted";
    } catch (const OptionError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("must be bf16, fp16, bf16-emulated or off, got '") + amp + "'");
    }
  }
  EXPECT_NE(error_of([] { pick_precision(AmpMode::Bf16Emulated, Device::cuda(0)); }).find("is for the CPU"),
            std::string::npos);
}

// The explicit choices on CUDA ask the device nothing, so they are checked here too.
TEST(Precision, CudaRunsTheActivationsInTheHalfType) {
  EXPECT_EQ(pick_precision(AmpMode::Bf16, Device::cuda(0)).activations, DType::BF16);
  EXPECT_EQ(pick_precision(AmpMode::Fp16, Device::cuda(0)).activations, DType::F16);
  EXPECT_EQ(pick_precision(AmpMode::Off, Device::cuda(0)).activations, DType::F32);
  EXPECT_EQ(pick_precision(AmpMode::Bf16, Device::cuda(0)).conv_operands, ops::ConvOperands::Float32);
  EXPECT_EQ(pick_precision(AmpMode::Bf16, Device::cuda(0)).describe(), dtype_name(DType::BF16));
}

TEST(Precision, SetConvOperandsReachesEveryConvolution) {
  const ModelConfig cfg = load_model_config("models/yolov5n.yaml");
  DetectionModel model(cfg, kNc, 0);
  layers::set_conv_operands(model, ops::ConvOperands::Bfloat16Emulated);
  int convs = 0, set = 0;
  model.visit([&](layers::Module& m) {
    if (auto* c = dynamic_cast<layers::Conv2d*>(&m)) {
      ++convs;
      set += c->operands == ops::ConvOperands::Bfloat16Emulated;
    }
  });
  EXPECT_GE(convs, 60);  // yolov5n's Conv blocks and Detect's three 1x1 convolutions
  EXPECT_EQ(set, convs);
}

// Losses, and how close two steps' gradients are over all parameters.
struct StepComparison {
  BatchStatus a, b;
  double cosine = 0, norm_ratio = 0;  // |grad b| / |grad a|
  int compared = 0, differ = 0;       // parameters with gradients, and those not bit-equal
};

StepComparison compare_steps(ops::ConvOperands a_operands, ops::ConvOperands b_operands) {
  Rig a(OptimizerKind::SGD, RankInfo{}), b(OptimizerKind::SGD, RankInfo{});
  layers::set_conv_operands(*a.model, a_operands);
  layers::set_conv_operands(*b.model, b_operands);
  a.step->forward_backward(input(5, false), targets(), 0, false, false);
  b.step->forward_backward(input(5, false), targets(), 0, false, false);
  StepComparison r;
  const std::vector<BatchStatus> sa = a.step->drain(), sb = b.step->drain();
  EXPECT_EQ(sa.size(), 1u);
  EXPECT_EQ(sb.size(), 1u);
  if (sa.size() != 1 || sb.size() != 1) return r;
  r.a = sa[0];
  r.b = sb[0];
  const std::vector<Tensor> pa = a.optimizer->parameters(), pb = b.optimizer->parameters();
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!pa[i].grad().defined()) continue;
    const Tensor ga = pa[i].grad().to(DType::F64).contiguous(), gb = pb[i].grad().to(DType::F64).contiguous();
    const double* x = ga.data<double>();
    const double* y = gb.data<double>();
    bool same = true;
    for (int64_t k = 0; k < ga.numel(); ++k) {
      dot += x[k] * y[k];
      na += x[k] * x[k];
      nb += y[k] * y[k];
      same = same && x[k] == y[k];
    }
    r.differ += !same;
    ++r.compared;
  }
  r.cosine = dot / std::sqrt(na * nb);
  r.norm_ratio = std::sqrt(nb / na);
  return r;
}

// One training step of yolov5n with every convolution on bfloat16 operands (emulated, so that it
// runs on any CPU) against the float32 step from the same weights and batch. This rig (64 px,
// batch 2, random weights: BN normalises 8 values a channel at the deepest level) amplifies
// rounding: one relative 2^-9 perturbation of the input images alone moves the float32 step's
// gradient to a cosine of 0.984 and its norm by 1.3 %; rounding every convolution's operands gives
// a cosine of about 0.95. The bounds therefore say "the same step, to bf16's accuracy" (a wrong
// gradient, transposed or unscaled, lands near 0 or far off), and that the rounding happened.
TEST(Precision, Bf16ConvolutionStepTracksTheFloat32Step) {
  const StepComparison r = compare_steps(ops::ConvOperands::Float32, ops::ConvOperands::Bfloat16Emulated);
  EXPECT_NEAR(r.b.box, r.a.box, 0.01 * r.a.box);
  EXPECT_NEAR(r.b.obj, r.a.obj, 0.01 * r.a.obj);
  EXPECT_NEAR(r.b.cls, r.a.cls, 0.01 * r.a.cls);
  EXPECT_GT(r.compared, 100);
  EXPECT_GT(r.cosine, 0.9) << "gradients of the bf16-convolution step point elsewhere";
  EXPECT_NEAR(r.norm_ratio, 1.0, 0.3);
  EXPECT_GT(r.differ, r.compared / 2) << "the convolutions did not round their operands";
}

// oneDNN's bf16 kernels against the emulation, over a whole step: the same roundings, float32 sums
// in another order. Their op-level agreement is checked to 1e-4 (kernels_conv2d_bf16_test); over
// 60 layers a sum that lands on the other side of a bfloat16 rounding boundary in one layer
// changes that value by 2^-9 in the next, so two bf16 steps differ as a perturbed float32 step
// does (cosine 0.986, losses 0.1-0.4 % apart, measured), and the bounds are those above.
TEST(Precision, NativeBf16StepMatchesTheEmulatedStep) {
  if (!kernels::cpu_bf16_support().native())
    GTEST_SKIP() << "this CPU has neither AVX-512 BF16 nor AMX-BF16 (or oneDNN is capped below them)";
  const StepComparison r = compare_steps(ops::ConvOperands::Bfloat16Emulated, ops::ConvOperands::Bfloat16);
  std::printf("native against emulated: cosine %.6f, norm ratio %.6f, losses %.6g %.6g %.6g / %.6g %.6g %.6g\n",
              r.cosine, r.norm_ratio, r.a.box, r.a.obj, r.a.cls, r.b.box, r.b.obj, r.b.cls);
  EXPECT_NEAR(r.b.box, r.a.box, 0.01 * r.a.box);
  EXPECT_NEAR(r.b.obj, r.a.obj, 0.01 * r.a.obj);
  EXPECT_NEAR(r.b.cls, r.a.cls, 0.01 * r.a.cls);
  EXPECT_GT(r.cosine, 0.9);
  EXPECT_NEAR(r.norm_ratio, 1.0, 0.3);
}

}  // namespace
