// Gradient compression's per-value math on the CPU (kernels/grad_compress.h): the order of PyTorch's
// compress hook (cast to the 16-bit type, then divide by the world size, rounding again), exact
// results where every step is representable, fp16 overflow to inf, bf16 keeping fp32's range, and
// a lossless widening of every 16-bit pattern.
#include "kernels/grad_compress.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

// One value through grad_compress_cpu and back through grad_decompress_cpu.
float round_trip(float g, DType half, int world) {
  Tensor wire = Tensor::empty({1}, half);
  float back = 0;
  kernels::grad_compress_cpu(&g, wire.data_ptr(), half, 1, world);
  kernels::grad_decompress_cpu(wire.data_ptr(), half, &back, 1);
  return back;
}

// The hook's arithmetic written independently: round to the 16-bit type through a double, divide
// in float, round again.
float reference(float g, DType half, int world) {
  Tensor h = Tensor::empty({1}, half);
  store_from_double(h.data_ptr(), half, 0, g);
  const float q = static_cast<float>(load_as_double(h.data_ptr(), half, 0)) / static_cast<float>(world);
  store_from_double(h.data_ptr(), half, 0, q);
  return static_cast<float>(load_as_double(h.data_ptr(), half, 0));
}

}  // namespace

TEST(GradCompress, RepresentableValuesPassExactly) {
  for (DType half : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(half));
    EXPECT_EQ(round_trip(3.0f, half, 2), 1.5f);
    EXPECT_EQ(round_trip(-0.75f, half, 1), -0.75f);
    EXPECT_EQ(round_trip(96.0f, half, 8), 12.0f);
    EXPECT_EQ(round_trip(0.0f, half, 3), 0.0f);
    EXPECT_EQ(round_trip(6.0f, half, 3), 2.0f);
  }
}

TEST(GradCompress, CastsBeforeDividingAsPyTorchsHook) {
  // 65519 rounds down to fp16's largest finite value 65504; 65520 rounds to inf before the
  // division by 2 could bring it into range (dividing first would give 32760).
  EXPECT_EQ(round_trip(65519.0f, DType::F16, 2), 32752.0f);
  EXPECT_EQ(round_trip(65520.0f, DType::F16, 2), kInf);
  EXPECT_EQ(round_trip(-1.0e6f, DType::F16, 8), -kInf);
  // bf16 has fp32's range: 70000 rounds to 70144 (8 significant bits), then halves exactly.
  EXPECT_EQ(round_trip(70000.0f, DType::BF16, 2), 35072.0f);
  EXPECT_EQ(round_trip(3.0e38f, DType::BF16, 4), reference(3.0e38f, DType::BF16, 4));
  EXPECT_TRUE(std::isfinite(round_trip(3.0e38f, DType::BF16, 4)));
  // 1/3 of an fp16 value rounds once more: the double rounding of the hook's order.
  EXPECT_EQ(round_trip(1.0f, DType::F16, 3), reference(1.0f, DType::F16, 3));
  EXPECT_TRUE(std::isnan(round_trip(std::nanf(""), DType::F16, 2)));
}

// The CPU converts 8 values at a time where it can (F16C) and the rest one by one: the edge cases
// in a long buffer give the same bits as each alone.
TEST(GradCompress, WholeBuffersAgreeWithSingleValuesOnTheEdgeCases) {
  const std::vector<float> g = {65519.0f, 65520.0f, -1.0e6f, 1.0e-8f, -3.0e-8f, 2.9802322e-8f,
                                0.0f, -0.0f, 1.0f / 3, 6.1e-5f, 6.0e-5f, kInf, -65504.0f, 2049.0f,
                                0.1f, 7.0f, 1.0e-30f};
  const int64_t n = static_cast<int64_t>(g.size());
  for (DType half : {DType::F16, DType::BF16}) {
    for (int world : {1, 2, 3}) {
      Tensor wire = Tensor::empty({n}, half);
      std::vector<float> back(g.size());
      kernels::grad_compress_cpu(g.data(), wire.data_ptr(), half, n, world);
      kernels::grad_decompress_cpu(wire.data_ptr(), half, back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(back[i], round_trip(g[i], half, world)) << dtype_name(half) << " g=" << g[i] << " world " << world;
        ASSERT_EQ(back[i], reference(g[i], half, world)) << dtype_name(half) << " g=" << g[i] << " world " << world;
      }
    }
  }
}

TEST(GradCompress, MatchesTheReferenceWithinOneRoundingOfEachStep) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> wide(-60000.0f, 60000.0f), unit(-1.0f, 1.0f),
      tiny(-1e-6f, 1e-6f);
  std::vector<float> g;
  for (int i = 0; i < 3000; ++i) g.push_back(i % 3 == 0 ? wide(rng) : i % 3 == 1 ? unit(rng) : tiny(rng));
  for (DType half : {DType::F16, DType::BF16}) {
    for (int world : {1, 2, 3, 8}) {
      Tensor wire = Tensor::empty({static_cast<int64_t>(g.size())}, half);
      std::vector<float> back(g.size());
      kernels::grad_compress_cpu(g.data(), wire.data_ptr(), half, static_cast<int64_t>(g.size()), world);
      kernels::grad_decompress_cpu(wire.data_ptr(), half, back.data(), static_cast<int64_t>(g.size()));
      // Two roundings to 11 (fp16) or 8 (bf16) significant bits, plus fp16's subnormal spacing.
      const double rel = half == DType::F16 ? 2 * std::ldexp(1.0, -11) : 2 * std::ldexp(1.0, -8);
      const double abs = half == DType::F16 ? std::ldexp(1.0, -24) : 0.0;
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(back[i], reference(g[i], half, world)) << dtype_name(half) << " g=" << g[i] << " world " << world;
        ASSERT_LE(std::abs(back[i] - static_cast<double>(g[i]) / world),
                  rel * std::abs(static_cast<double>(g[i]) / world) + abs)
            << dtype_name(half) << " g=" << g[i] << " world " << world;
      }
    }
  }
}

TEST(GradCompress, WideningIsExactForEverySixteenBitPattern) {
  for (DType half : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> bits(65536);
    for (int i = 0; i < 65536; ++i) bits[i] = static_cast<uint16_t>(i);
    std::vector<float> out(bits.size());
    kernels::grad_decompress_cpu(bits.data(), half, out.data(), 65536);
    for (int i = 0; i < 65536; ++i) {
      const double want = load_as_double(bits.data(), half, i);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(out[i])) << i;
      else
        ASSERT_EQ(out[i], want) << dtype_name(half) << " pattern " << i;
    }
  }
}

TEST(GradCompress, RefusesOtherTypesAndWorldSizes) {
  float g = 1, back = 0;
  Tensor wire = Tensor::empty({1}, DType::F32);
  EXPECT_NE(kestrel::testing::error_of([&] { kernels::grad_compress_cpu(&g, wire.data_ptr(), DType::F32, 1, 2); })
                .find("compresses to f16 or bf16"),
            std::string::npos);
  EXPECT_NE(kestrel::testing::error_of([&] { kernels::grad_compress_cpu(&g, wire.data_ptr(), DType::F16, 1, 0); })
                .find("world size must be at least 1"),
            std::string::npos);
  EXPECT_NE(kestrel::testing::error_of([&] { kernels::grad_decompress_cpu(wire.data_ptr(), DType::I32, &back, 1); })
                .find("decompresses f16 or bf16"),
            std::string::npos);
}
