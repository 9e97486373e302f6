// CUDA max pooling against the CPU reference, in float32, bfloat16 and float16.
// Forward selects an element and copies it, and both devices run the same scan
// (kernels/maxpool.h) on the same values (the CPU on the bf16/fp16 inputs widened to float32, which
// is exact), so outputs must be identical, NaNs included. Backward gathers the same dy values in
// the same order and sums them in float on both devices, rounding once on CUDA, so the CUDA
// gradient equals the CPU float32 gradient rounded to the CUDA dtype, exactly. Inputs with
// heavy ties, NaN and -inf check that both devices pick the same element.
#include <algorithm>
#include <cmath>
#include <random>

#include "engine/ops/pool.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

namespace {

struct Case {
  Shape shape;
  int64_t k, s, p;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << shape_str(c.shape) << " k" << c.k << " s" << c.s << " p" << c.p;
}

enum class Data { Random, Ties, Special };

// Random values; or values from {0, 1, 2, 3} (every window full of ties); or random values
// sprinkled with NaN and -inf.
Tensor make_input(const Shape& shape, Data kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v = random_tensor(shape, seed, DType::F64, -4, 4).to_double_vector();
  for (double& x : v) {
    if (kind == Data::Ties) x = static_cast<double>(rng() % 4);
    if (kind == Data::Special && rng() % 23 == 0) x = rng() % 2 ? NAN : -INFINITY;
  }
  return Tensor::from_vector(v, shape);
}

// Equal element by element, NaN matching NaN.
::testing::AssertionResult same_values(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  if (x.size() != y.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

class MaxPoolCuda : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(MaxPoolCuda, ForwardAndBackwardMatchCpuExactly) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (Data kind : {Data::Random, Data::Ties, Data::Special}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " data " << int(kind));
      Tensor x = make_input(c.shape, kind, 5).to(dtype);
      Tensor x_gpu = x.to(Device::cuda(0)).set_requires_grad();
      Tensor x_cpu = x.to(DType::F32).set_requires_grad();
      Tensor y_gpu = ops::max_pool2d(x_gpu, c.k, c.s, c.p);
      Tensor y_cpu = ops::max_pool2d(x_cpu, c.k, c.s, c.p);
      EXPECT_TRUE(same_values(y_gpu, y_cpu));
      Tensor dy = random_tensor(y_cpu.shape(), 6, DType::F32, -2, 2).to(dtype);
      y_gpu.backward(dy.to(Device::cuda(0)));
      y_cpu.backward(dy.to(DType::F32));
      EXPECT_TRUE(same_values(x_gpu.grad(), x_cpu.grad().to(dtype)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MaxPoolCuda,
                         ::testing::Values(Case{{2, 20, 20, 64}, 5, 1, 2},  // SPPF
                                           Case{{1, 7, 9, 3}, 5, 1, 2}, Case{{3, 5, 6, 5}, 3, 2, 1},
                                           Case{{2, 8, 8, 16}, 2, 2, 0},
                                           Case{{1, 9, 7, 2}, 4, 3, 2},
                                           Case{{2, 6, 5, 3}, 1, 1, 0}));

TEST(MaxPoolCudaSppf, ChainOfThreeMatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Tensor x = make_input({2, 20, 20, 32}, Data::Ties, 7).to(DType::BF16);
  Tensor g = x.to(Device::cuda(0)), c = x.to(DType::F32);
  for (int i = 0; i < 3; ++i) {
    g = ops::max_pool2d(g, 5, 1, 2);
    c = ops::max_pool2d(c, 5, 1, 2);
    EXPECT_TRUE(same_values(g, c)) << "pool " << i;
  }
}

// The argmax of window (oh, ow) of a [1, H, W, 1] tensor under k3 s1 p1, scanning row-major and
// keeping the first maximum: an independent restatement of the rule for the sampled check below.
int64_t naive_argmax(const std::vector<bf16>& x, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  int64_t best = -1;
  for (int64_t h = std::max<int64_t>(oh - 1, 0); h <= std::min(oh + 1, H - 1); ++h)
    for (int64_t w = std::max<int64_t>(ow - 1, 0); w <= std::min(ow + 1, W - 1); ++w)
      if (best < 0 || __bfloat162float(x[h * W + w]) > __bfloat162float(x[best])) best = h * W + w;
  return best;
}

TEST(MaxPoolCudaLarge, BeyondInt32Offsets) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // [1, 2, 2^30 + 1, 1] bf16: over 2^31 elements, so both kernels take the 64-bit indexing path.
  // Values from {0, ..., 7} make ties common. Checked at sampled positions and at the very end.
  const int64_t H = 2, W = (int64_t(1) << 30) + 1;
  bf16 levels[8];
  for (int v = 0; v < 8; ++v) levels[v] = __float2bfloat16(float(v));
  std::vector<bf16> host(H * W);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = levels[static_cast<uint32_t>(i * 2654435761u) >> 29];
  Tensor x = Tensor::from_vector(host, {1, H, W, 1}, Device::cuda(0)).set_requires_grad();
  Tensor y = ops::max_pool2d(x, 3, 1, 1);
  y.backward(Tensor::ones(y.shape(), DType::BF16, Device::cuda(0)));

  std::vector<int64_t> samples;
  std::mt19937_64 rng(8);
  for (int i = 0; i < 100000; ++i) samples.push_back(static_cast<int64_t>(rng() % (H * W)));
  for (int64_t i = H * W - 2000; i < H * W; ++i) samples.push_back(i);
  {
    std::vector<bf16> out = y.to_vector<bf16>();
    for (int64_t i : samples)
      ASSERT_EQ(__bfloat162float(out[i]),
                __bfloat162float(host[naive_argmax(host, H, W, i / W, i % W)]))
          << "output " << i;
  }
  // With dy = 1, an input's gradient counts the windows that chose it.
  std::vector<bf16> dx = x.grad().to_vector<bf16>();
  for (int64_t i : samples) {
    const int64_t h = i / W, w = i % W;
    int count = 0;
    for (int64_t oh = std::max<int64_t>(h - 1, 0); oh <= std::min(h + 1, H - 1); ++oh)
      for (int64_t ow = std::max<int64_t>(w - 1, 0); ow <= std::min(w + 1, W - 1); ++ow)
        count += naive_argmax(host, H, W, oh, ow) == i;
    ASSERT_EQ(__bfloat162float(dx[i]), float(count)) << "input " << i;
  }
}
