// The CPU's mixed precision for convolutions (ops::ConvOperands): the bfloat16 rounding against
// CUDA's __float2bfloat16_rn, the CPU's bf16 detection against /proc/cpuinfo, the emulation
// against float32 passes on rounded operands (bit for bit) and float64 (to bf16's accuracy), and
// oneDNN's native bf16 kernels against the emulation where the CPU has them.
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops/conv.h"
#include "kernels/bf16_operands.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::error_of;
using kestrel::testing::random_tensor;

namespace {

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

uint16_t cuda_bf16_bits(float v) {
  const bf16 h = __float2bfloat16_rn(v);
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}

TEST(Bf16Rounding, MatchesCudaRoundToNearestEven) {
  std::mt19937 gen(7);
  std::vector<uint32_t> patterns = {0u,          0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u,
                                    0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                    0x00000001u, 0x007fffffu, 0x00008000u, 0x00018000u};
  for (int i = 0; i < 2000000; ++i) patterns.push_back(gen());
  int64_t nans = 0;
  for (uint32_t b : patterns) {
    const float v = float_of(b);
    if (std::isnan(v)) {
      ++nans;
      EXPECT_TRUE(std::isnan(kernels::round_to_bf16(v))) << std::hex << b;
      EXPECT_EQ(kernels::bf16_bits(v) & 0x8000u, (b >> 16) & 0x8000u) << "sign of NaN " << std::hex << b;
      continue;
    }
    ASSERT_EQ(kernels::bf16_bits(v), cuda_bf16_bits(v)) << "bits " << std::hex << b;
    ASSERT_EQ(bits_of(kernels::round_to_bf16(v)), uint32_t(cuda_bf16_bits(v)) << 16) << std::hex << b;
  }
  EXPECT_GT(nans, 0);  // the random patterns include NaNs: the branch above ran
}

TEST(Bf16Rounding, ThreadedPassesMatchTheScalarRounding) {
  const int64_t n = 300001;  // above the threading threshold, odd
  std::vector<float> src(n), rounded(n);
  std::vector<uint16_t> halves(n);
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 10.0f);
  for (float& v : src) v = dist(gen);
  kernels::round_to_bf16_cpu(src.data(), rounded.data(), n);
  kernels::float_to_bf16_cpu(src.data(), halves.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(halves[i], cuda_bf16_bits(src[i])) << i;
    ASSERT_EQ(bits_of(rounded[i]), uint32_t(halves[i]) << 16) << i;
  }
  kernels::round_to_bf16_cpu(src.data(), src.data(), n);  // in place
  EXPECT_EQ(std::memcmp(src.data(), rounded.data(), n * sizeof(float)), 0);
}

TEST(CpuBf16Support, AgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo to compare with";
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo lists no flags (not x86)";
  const kernels::CpuBf16Support s = kernels::cpu_bf16_support();
  // The kernel lists a flag only where the CPU has it and the kernel enabled its state.
  EXPECT_EQ(s.avx512_bf16, flags.find(" avx512_bf16 ") != std::string::npos) << flags;
  EXPECT_EQ(s.amx_bf16, flags.find(" amx_bf16 ") != std::string::npos) << flags;
}

struct Case {
  const char* name;
  Shape x;
  int64_t o, k, stride, pad;
  bool bias;
};

const std::vector<Case> kCases = {
    {"3x3", {2, 9, 8, 5}, 7, 3, 1, 1, false},
    {"3x3 stride 2", {2, 10, 9, 16}, 8, 3, 2, 1, false},
    {"1x1 with bias (the Detect head)", {3, 6, 5, 12}, 9, 1, 1, 0, true},
    {"6x6 stride 2 (the stem)", {1, 16, 14, 3}, 8, 6, 2, 2, false},
    // 2048 rows and 4.7 MB of bfloat16 im2col an image: backward-weights runs one piece per image,
    // each matmul accumulating onto the last
    {"3x3 in three pieces", {3, 32, 64, 128}, 16, 3, 1, 1, false},
};

ops::Conv2dParams params_of(const Case& c, ops::ConvOperands operands) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = c.stride;
  p.pad_h = p.pad_w = c.pad;
  p.operands = operands;
  return p;
}

Tensor rounded(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  Tensor r = Tensor::empty(c.shape(), DType::F32);
  kernels::round_to_bf16_cpu(c.data<float>(), r.data<float>(), c.numel());
  return r;
}

// Forward and every gradient of one convolution on `operands`.
struct Results {
  Tensor y, dx, dw, db;
};

Results run(const Case& c, ops::ConvOperands operands, uint64_t seed) {
  Tensor x = random_tensor(c.x, seed, DType::F32).set_requires_grad();
  Tensor w = random_tensor({c.o, c.k, c.k, c.x[3]}, seed + 1, DType::F32, -0.5, 0.5).set_requires_grad();
  Tensor b = c.bias ? random_tensor({c.o}, seed + 2, DType::F32).set_requires_grad() : Tensor();
  Tensor y = ops::conv2d(x, w, b, params_of(c, operands));
  Tensor dy = random_tensor(y.shape(), seed + 3, DType::F32);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), c.bias ? b.grad() : Tensor()};
}

TEST(Conv2dBf16, EmulatedIsTheFloat32ConvolutionOfRoundedOperands) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const uint64_t seed = 11;
    const Results e = run(c, ops::ConvOperands::Bfloat16Emulated, seed);
    // The same tensors as run() draws, rounded by hand and run through the float32 passes.
    Tensor x = random_tensor(c.x, seed, DType::F32);
    Tensor w = random_tensor({c.o, c.k, c.k, c.x[3]}, seed + 1, DType::F32, -0.5, 0.5);
    Tensor b = c.bias ? random_tensor({c.o}, seed + 2, DType::F32) : Tensor();
    const ops::Conv2dParams p = params_of(c, ops::ConvOperands::Float32);
    Tensor y = ops::conv2d(rounded(x), rounded(w), b, p);
    Tensor dy = random_tensor(y.shape(), seed + 3, DType::F32);
    EXPECT_TRUE(all_close(e.y, y, 0, 0));
    EXPECT_TRUE(all_close(e.dx, ops::conv2d_backward_data(rounded(dy), rounded(w), x.shape(), p), 0, 0));
    EXPECT_TRUE(all_close(e.dw, ops::conv2d_backward_filter(rounded(x), rounded(dy), w.shape(), p), 0, 0));
    if (c.bias) {
      EXPECT_TRUE(all_close(e.db, ops::conv2d_backward_bias(dy), 0, 0));  // from dy itself
    }
    // The operands were rounded: float32 gives other values.
    const Results f = run(c, ops::ConvOperands::Float32, seed);
    EXPECT_FALSE(all_close(e.y, f.y, 0, 0));
    EXPECT_FALSE(all_close(e.dw, f.dw, 0, 0));
  }
}

TEST(Conv2dBf16, EmulatedIsWithinBfloat16sAccuracyOfFloat64) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Results e = run(c, ops::ConvOperands::Bfloat16Emulated, 21);
    Tensor x = random_tensor(c.x, 21, DType::F64).set_requires_grad();
    Tensor w = random_tensor({c.o, c.k, c.k, c.x[3]}, 22, DType::F64, -0.5, 0.5).set_requires_grad();
    Tensor b = c.bias ? random_tensor({c.o}, 23, DType::F64).set_requires_grad() : Tensor();
    Tensor y = ops::conv2d(x, w, b, params_of(c, ops::ConvOperands::Float32));
    y.backward(random_tensor(y.shape(), 24, DType::F64));
    // Each product carries two roundings of 2^-9 relative; sums of up to a few hundred terms of
    // magnitude <= 0.5 stay well inside these bounds, and a missing rounding is far inside them.
    EXPECT_TRUE(all_close(e.y, y, 0.05, 0.02));
    EXPECT_TRUE(all_close(e.dx, x.grad(), 0.05, 0.02));
    EXPECT_TRUE(all_close(e.dw, w.grad(), 0.2, 0.02));
    if (c.bias) {
      EXPECT_TRUE(all_close(e.db, b.grad(), 1e-4, 1e-5));
    }
  }
}

TEST(Conv2dBf16, OnlyFloat32InputsOnTheCpu) {
  const Case& c = kCases[0];
  const ops::Conv2dParams p = params_of(c, ops::ConvOperands::Bfloat16Emulated);
  const Tensor x = random_tensor(c.x, 1, DType::F64), w = random_tensor({c.o, 3, 3, c.x[3]}, 2, DType::F64);
  EXPECT_NE(error_of([&] { ops::conv2d(x, w, Tensor(), p); }).find("float32 mixed precision"), std::string::npos);
}

TEST(Conv2dBf16, NativeIsRefusedWithoutTheInstructions) {
  if (kernels::cpu_bf16_support().native()) GTEST_SKIP() << "this CPU has bf16 instructions";
  const Case& c = kCases[0];
  const Tensor x = random_tensor(c.x, 1, DType::F32), w = random_tensor({c.o, 3, 3, c.x[3]}, 2, DType::F32);
  const std::string e = error_of([&] { ops::conv2d(x, w, Tensor(), params_of(c, ops::ConvOperands::Bfloat16)); });
  EXPECT_NE(e.find("AVX-512 BF16 or AMX"), std::string::npos) << e;
  EXPECT_NE(e.find("Bfloat16Emulated"), std::string::npos) << e;
}

// oneDNN's bf16 kernels multiply the same rounded values and accumulate in float32, in their own
// order: the results agree with the emulation to float32 sums' accuracy, not bit for bit.
TEST(Conv2dBf16, NativeAgreesWithTheEmulation) {
  const kernels::CpuBf16Support s = kernels::cpu_bf16_support();
  if (!s.native())
    GTEST_SKIP() << "this CPU has neither AVX-512 BF16 nor AMX-BF16: oneDNN's bf16 convolutions "
                    "cannot run here (the emulation's tests above still ran)";
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Results n = run(c, ops::ConvOperands::Bfloat16, 31);
    const Results e = run(c, ops::ConvOperands::Bfloat16Emulated, 31);
    EXPECT_TRUE(all_close(n.y, e.y, 1e-4, 1e-4));
    EXPECT_TRUE(all_close(n.dx, e.dx, 1e-4, 1e-4));
    EXPECT_TRUE(all_close(n.dw, e.dw, 1e-3, 1e-4));
    if (c.bias) {
      EXPECT_TRUE(all_close(n.db, e.db, 0, 0));
    }
    const Tensor x = random_tensor(c.x, 1, DType::F32);
    const Tensor w = random_tensor({c.o, c.k, c.k, c.x[3]}, 2, DType::F32);
    std::printf("%s: forward %s, backward-data %s, backward-weights %s\n", c.name,
                ops::conv2d_algorithm(kernels::ConvPass::Forward, x, w, params_of(c, ops::ConvOperands::Bfloat16)).c_str(),
                ops::conv2d_algorithm(kernels::ConvPass::BackwardData, x, w, params_of(c, ops::ConvOperands::Bfloat16)).c_str(),
                ops::conv2d_algorithm(kernels::ConvPass::BackwardFilter, x, w, params_of(c, ops::ConvOperands::Bfloat16)).c_str());
  }
}

}  // namespace
