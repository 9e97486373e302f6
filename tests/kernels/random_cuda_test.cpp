// Philox fills on CUDA against the CPU reference. The conversions use only integer and correctly
// rounded float operations (kernels/philox.h), so both uniform and normal fills must agree bit for
// bit, not merely closely: any difference is a bug.
#include <cstring>

#include "engine/random.h"
#include "engine/stream.h"
#include "kernels/random.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

const Device kGpu = Device::cuda(0);

// Index and values of the first bitwise difference, or success.
::testing::AssertionResult bitwise_equal(const std::vector<float>& gpu,
                                         const std::vector<float>& cpu) {
  if (gpu.size() != cpu.size())
    return ::testing::AssertionFailure() << "sizes " << gpu.size() << " vs " << cpu.size();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i)
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0 && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differ << " of " << gpu.size()
                                       << " elements differ; first at " << first << ": cuda "
                                       << gpu[first] << " vs cpu " << cpu[first];
}

}  // namespace

TEST(RandomCuda, KnownAnswerVectorsOnTheDevice) {
  KESTREL_SKIP_WITHOUT_CUDA();
  struct Case {
    kernels::PhiloxPosition at;
    uint32_t expected[4];
  };
  // Random123's philox4x32_10 vectors, as (seed = key, stream = counter words 2-3, offset = 0-1).
  const Case cases[] = {
      {{0, 0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{~0ull, ~0ull, ~0ull}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  Tensor buf = Tensor::empty({4}, DType::I32, kGpu);
  for (const Case& c : cases) {
    kernels::random_bits_cuda(c.at, static_cast<uint32_t*>(buf.data_ptr()), 4,
                              current_stream(kGpu).handle());
    std::vector<int32_t> got = buf.to_vector<int32_t>();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<uint32_t>(got[i]), c.expected[i]);
  }
}

TEST(RandomCuda, RawBitsMatchCpuAtEveryLengthAndAlignment) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const kernels::PhiloxPosition at{0x1234567890abcdefull, 9, (1ull << 32) - 3};  // counter carry
  for (int64_t n : {1, 3, 4, 5, 1023, 100003}) {
    for (int64_t shift : {0, 1, 2, 3}) {  // output pointers off the 16-byte grid take the scalar path
      Tensor buf = Tensor::empty({n + shift}, DType::I32, kGpu);
      uint32_t* out = static_cast<uint32_t*>(buf.data_ptr()) + shift;
      kernels::random_bits_cuda(at, out, n, current_stream(kGpu).handle());
      std::vector<int32_t> got = buf.to_vector<int32_t>();
      std::vector<uint32_t> want(n);
      kernels::random_bits_cpu(at, want.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(static_cast<uint32_t>(got[shift + i]), want[i])
            << "n " << n << " shift " << shift << " element " << i;
    }
  }
}

TEST(RandomCuda, UniformFillsMatchCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const std::pair<double, double> ranges[] = {{0, 1}, {-0.0625, 0.0625}, {-3.7, 12.25}, {1e-3, 2e-3}};
  for (const auto& [lo, hi] : ranges) {
    Generator cpu(2024, 17), gpu(2024, 17);
    cpu.set_offset(5);
    gpu.set_offset(5);
    for (const Shape& shape : {Shape{1000003}, Shape{3, 5, 7}, Shape{1}}) {
      Tensor c = Tensor::empty(shape), g = Tensor::empty(shape, DType::F32, kGpu);
      cpu.fill_uniform(c, lo, hi);
      gpu.fill_uniform(g, lo, hi);
      EXPECT_TRUE(bitwise_equal(g.to_vector<float>(), c.to_vector<float>()))
          << "range [" << lo << ", " << hi << ") shape " << shape_str(shape);
      EXPECT_EQ(gpu.offset(), cpu.offset());
    }
  }
}

TEST(RandomCuda, NormalFillsMatchCpuBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Generator cpu(7, 1), gpu(7, 1);
  for (const auto& [mean, std] : {std::pair{0.0, 1.0}, {0.0, 0.02}, {-1.5, 3.0}}) {
    Tensor c = Tensor::empty({1 << 20}), g = Tensor::empty({1 << 20}, DType::F32, kGpu);
    cpu.fill_normal(c, mean, std);
    gpu.fill_normal(g, mean, std);
    EXPECT_TRUE(bitwise_equal(g.to_vector<float>(), c.to_vector<float>()))
        << "mean " << mean << " std " << std;
  }
  EXPECT_EQ(gpu.offset(), cpu.offset());
}

TEST(RandomCuda, ViewsAndMisalignedTensorsMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Tensor g_base = Tensor::zeros({33, 17}, DType::F32, kGpu);
  Tensor c_base = Tensor::zeros({33, 17});
  Generator gpu(3), cpu(3);
  // A transposed view, then a slice starting one element in (its data is not 16-byte aligned).
  gpu.fill_normal(g_base.transpose(0, 1), 0, 1);
  cpu.fill_normal(c_base.transpose(0, 1), 0, 1);
  EXPECT_TRUE(bitwise_equal(g_base.to_vector<float>(), c_base.to_vector<float>()));
  Tensor g_flat = Tensor::zeros({1001}, DType::F32, kGpu), c_flat = Tensor::zeros({1001});
  gpu.fill_uniform(g_flat.slice(0, 1, 1001), -1, 1);
  cpu.fill_uniform(c_flat.slice(0, 1, 1001), -1, 1);
  EXPECT_TRUE(bitwise_equal(g_flat.to_vector<float>(), c_flat.to_vector<float>()));
  EXPECT_EQ(g_flat.to_vector<float>()[0], 0.0f);  // outside the view: untouched
}
