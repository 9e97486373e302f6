// CUDA concat against the CPU one. Concat and its backward only move data, so every dtype must
// agree bit for bit: all comparisons are exact (tolerance 0). Cases cover the 16-byte path
// (YOLOv5's channel concats), narrower accesses forced by odd sizes and odd byte offsets (u8),
// non-channel dimensions, and tensors large enough to need 64-bit indexing.
#include <cstring>

#include "engine/ops/concat.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

namespace {

struct Case {
  Shape base;  // the size at dim is replaced by each of `sizes`
  int64_t dim;
  std::vector<int64_t> sizes;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << shape_str(c.base) << " dim " << c.dim << " sizes " << shape_str(c.sizes);
}

class ConcatCuda : public ::testing::TestWithParam<Case> {};

std::vector<Tensor> make_inputs(const Case& c, DType dtype) {
  std::vector<Tensor> xs;
  const int64_t d = c.dim < 0 ? c.dim + static_cast<int64_t>(c.base.size()) : c.dim;
  uint64_t seed = 1;
  for (int64_t size : c.sizes) {
    Shape s = c.base;
    s[d] = size;
    xs.push_back(random_tensor(s, seed++, DType::F64, 0, 250).to(dtype));
  }
  return xs;
}

}  // namespace

TEST_P(ConcatCuda, ForwardAndBackwardMatchCpuExactly) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::U8}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> cpu = make_inputs(c, dtype), gpu;
    for (const Tensor& x : cpu) gpu.push_back(x.to(Device::cuda(0)));
    const bool grads = dtype != DType::U8;
    // Every input but the second requires grad: its gradient must stay undefined.
    for (size_t i = 0; grads && i < cpu.size(); ++i) {
      if (i == 1) continue;
      cpu[i].set_requires_grad();
      gpu[i].set_requires_grad();
    }
    Tensor y_cpu = ops::concat(cpu, c.dim), y_gpu = ops::concat(gpu, c.dim);
    ASSERT_TRUE(y_gpu.device().is_cuda());
    EXPECT_EQ(y_gpu.to_double_vector(), y_cpu.to_double_vector());
    if (!grads) continue;
    Tensor dy = random_tensor(y_cpu.shape(), 99, DType::F32, -4, 4).to(dtype);
    y_cpu.backward(dy);
    y_gpu.backward(dy.to(Device::cuda(0)));
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(gpu[i].grad().defined(), i != 1);
      if (i != 1) {
        EXPECT_EQ(gpu[i].grad().to_double_vector(), cpu[i].grad().to_double_vector());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConcatCuda,
    ::testing::Values(Case{{2, 80, 80, 0}, -1, {128, 128}},       // YOLOv5s head, P3
                      Case{{2, 20, 20, 0}, 3, {64, 64, 64, 64}},  // SPPF
                      Case{{3, 7, 9, 0}, 3, {3, 5, 1}},           // odd channel counts
                      Case{{2, 5, 3, 0}, 3, {1, 2, 7}},           // odd byte offsets for u8
                      Case{{0, 6, 5, 3}, 0, {1, 4, 2}}, Case{{4, 0, 5, 3}, 1, {3, 1, 2}},
                      Case{{4, 6, 0, 3}, 2, {5, 2, 1}}));

TEST(ConcatCudaLarge, BeyondInt32Offsets) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // Rows of 2^30 + 1 and 2 bytes: the output row of 2^30 + 3 bytes only allows 1-byte accesses
  // and its last offsets exceed 2^31, so the 64-bit indexing path runs.
  const int64_t wide = (int64_t(1) << 30) + 1;
  std::vector<uint8_t> a(2 * wide), b = {7, 8, 9, 10};
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<uint8_t>(static_cast<uint32_t>(i * 2654435761u) >> 24);
  Tensor y = ops::concat({Tensor::from_vector(a, {2, wide}, Device::cuda(0)),
                          Tensor::from_vector(b, {2, 2}, Device::cuda(0))},
                         1);
  std::vector<uint8_t> out = y.to_vector<uint8_t>();
  ASSERT_EQ(out.size(), size_t(2 * (wide + 2)));
  for (int64_t r = 0; r < 2; ++r) {
    const uint8_t* row = out.data() + r * (wide + 2);
    EXPECT_EQ(std::memcmp(row, a.data() + r * wide, wide), 0) << "row " << r;
    EXPECT_EQ(row[wide], b[2 * r]);
    EXPECT_EQ(row[wide + 1], b[2 * r + 1]);
  }
}
