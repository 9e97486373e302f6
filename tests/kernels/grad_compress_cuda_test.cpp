// CUDA gradient compression (kernels/grad_compress) against its CPU twin. Both compute
// compress_grad / decompress_grad: a round-to-nearest-even conversion to the 16-bit type, a
// correctly rounded float division (div_rn), and a second conversion; the CPU's F16C path rounds
// the same way. So every finite or infinite result must be the same 16-bit pattern on both, and
// every widened value the same float bits. NaN stays NaN on both, but its payload may differ (the
// device returns the canonical NaN, F16C keeps the input's top payload bits), so NaNs are compared
// as NaN. Sizes cover single elements, the CPU's 8-wide blocks and their tails, odd lengths over
// several blocks of the grid, a misaligned start, and nothing written outside [0, n).
#include "kernels/grad_compress.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/stream.h"
#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

// Random gradients of several magnitudes with every special case sprinkled in: infinities, NaN
// (both signs), signed zeros, fp16's overflow edge, fp16 subnormals, bf16 (= float) subnormals,
// values near float's maximum, and halfway cases of both roundings.
std::vector<float> gradients(int64_t n, uint64_t seed) {
  static const float specials[] = {
      kInf, -kInf, kNan, -kNan, 0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1.0e6f,
      6.0e-8f, 2.9802322e-8f, -5.9604645e-8f, 1.0e-8f, 6.1e-5f, 6.0e-5f, 1.0e-39f, -3.0e-40f,
      1.4e-45f, 3.0e38f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      2049.0f, 2051.0f, 1.00390625f, 1.01171875f, -1.00390625f, 1.0f / 3, 0.1f, 7.0f,
      std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min()};
  const int64_t n_specials = static_cast<int64_t>(sizeof(specials) / sizeof(specials[0]));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f), unit(-1.0f, 1.0f),
      tiny(-1e-5f, 1e-5f);
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng() % 16;
    if (r == 0)
      g[static_cast<size_t>(i)] = specials[rng() % n_specials];
    else if (r < 5)
      g[static_cast<size_t>(i)] = wide(rng);
    else if (r < 10)
      g[static_cast<size_t>(i)] = unit(rng);
    else
      g[static_cast<size_t>(i)] = tiny(rng);
  }
  // The first values are the specials themselves, so even short buffers see them.
  for (int64_t i = 0; i < n && i < n_specials; ++i) g[static_cast<size_t>(i)] = specials[(i * 7) % n_specials];
  return g;
}

bool is_nan16(uint16_t h, DType half) {
  return half == DType::F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0
                            : (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0;
}

std::vector<uint16_t> host_bits(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  std::vector<uint16_t> bits(static_cast<size_t>(host.numel()));
  if (!bits.empty()) std::memcpy(bits.data(), host.data_ptr(), bits.size() * 2);
  return bits;
}

std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * 4);
  return bits;
}

// Same 16-bit pattern, or both NaN; names the first difference.
::testing::AssertionResult same_halves(const std::vector<uint16_t>& gpu, const std::vector<uint16_t>& cpu,
                                       DType half, const std::vector<float>* inputs = nullptr) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i] == cpu[i] || (is_nan16(gpu[i], half) && is_nan16(cpu[i], half))) continue;
    ::testing::AssertionResult r = ::testing::AssertionFailure();
    r << dtype_name(half) << " element " << i << ": cuda 0x" << std::hex << gpu[i] << " vs cpu 0x" << cpu[i]
      << std::dec;
    if (inputs) r << " (input " << (*inputs)[i] << ")";
    return r;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_floats(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << "sizes differ";
  const std::vector<uint32_t> a = float_bits(gpu), b = float_bits(cpu);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(gpu[i]) && std::isnan(cpu[i]))) continue;
    return ::testing::AssertionFailure() << "element " << i << ": cuda " << gpu[i] << " (0x" << std::hex
                                         << a[i] << ") vs cpu " << cpu[i] << " (0x" << b[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

const int64_t kSizes[] = {1, 2, 3, 7, 8, 9, 15, 17, 255, 256, 257, 1001, 4097, 65537, (1 << 20) + 3};

}  // namespace

TEST(GradCompressCuda, CompressMatchesTheCpuBitForBit) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream stream = current_stream(gpu);
  for (DType half : {DType::F16, DType::BF16}) {
    for (int64_t n : kSizes) {
      const std::vector<float> g = gradients(n, static_cast<uint64_t>(n));
      const Tensor src = Tensor::from_vector(g, {n}, gpu);
      for (int world : {1, 2, 3, 8}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(half) << " n " << n << " world " << world);
        std::vector<uint16_t> want(static_cast<size_t>(n));
        kernels::grad_compress_cpu(g.data(), want.data(), half, n, world);
        const Tensor wire = Tensor::empty({n}, half, gpu);
        kernels::grad_compress_cuda(src.data<float>(), wire.data_ptr(), half, n, world, stream.handle());
        stream.synchronize();
        ASSERT_TRUE(same_halves(host_bits(wire), want, half, &g));
      }
    }
  }
}

TEST(GradCompressCuda, DecompressMatchesTheCpuForEverySixteenBitPattern) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream stream = current_stream(gpu);
  std::vector<uint16_t> patterns(65536);
  for (int i = 0; i < 65536; ++i) patterns[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  for (DType half : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(half));
    Tensor wire = Tensor::empty({65536}, half);
    std::memcpy(wire.data_ptr(), patterns.data(), patterns.size() * 2);
    wire = wire.to(gpu);
    const Tensor out = Tensor::empty({65536}, DType::F32, gpu);
    kernels::grad_decompress_cuda(wire.data_ptr(), half, out.data<float>(), 65536, stream.handle());
    stream.synchronize();
    std::vector<float> want(65536);
    kernels::grad_decompress_cpu(patterns.data(), half, want.data(), 65536);
    EXPECT_TRUE(same_floats(out.to_vector<float>(), want));
    // Odd lengths through the same kernel: a prefix of 65535 and of 9 patterns.
    for (int64_t n : {int64_t(9), int64_t(65535)}) {
      const Tensor part = Tensor::full({n}, -1.0, DType::F32).to(gpu);
      kernels::grad_decompress_cuda(wire.data_ptr(), half, part.data<float>(), n, stream.handle());
      stream.synchronize();
      EXPECT_TRUE(same_floats(part.to_vector<float>(), std::vector<float>(want.begin(), want.begin() + n)))
          << "n " << n;
    }
  }
}

TEST(GradCompressCuda, RoundTripMatchesTheCpuRoundTrip) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream stream = current_stream(gpu);
  for (DType half : {DType::F16, DType::BF16}) {
    for (int64_t n : {int64_t(1), int64_t(13), int64_t(100003)}) {
      for (int world : {2, 3}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(half) << " n " << n << " world " << world);
        const std::vector<float> g = gradients(n, 100 + static_cast<uint64_t>(n));
        std::vector<uint16_t> wire_cpu(static_cast<size_t>(n));
        std::vector<float> back_cpu(static_cast<size_t>(n));
        kernels::grad_compress_cpu(g.data(), wire_cpu.data(), half, n, world);
        kernels::grad_decompress_cpu(wire_cpu.data(), half, back_cpu.data(), n);
        const Tensor src = Tensor::from_vector(g, {n}, gpu);
        const Tensor wire = Tensor::empty({n}, half, gpu);
        const Tensor back = Tensor::empty({n}, DType::F32, gpu);
        kernels::grad_compress_cuda(src.data<float>(), wire.data_ptr(), half, n, world, stream.handle());
        kernels::grad_decompress_cuda(wire.data_ptr(), half, back.data<float>(), n, stream.handle());
        stream.synchronize();
        EXPECT_TRUE(same_floats(back.to_vector<float>(), back_cpu));
        // And some concrete values: the specials at the start (see gradients()).
        const std::vector<float> got = back.to_vector<float>();
        for (int64_t i = 0; i < n; ++i) {
          const float x = g[static_cast<size_t>(i)];
          const float y = got[static_cast<size_t>(i)];
          if ((x == 3.0e38f || x == 65520.0f) && half == DType::F16) {
            EXPECT_EQ(y, kInf) << "input " << x;
          }
          if (x == 7.0f && world == 2) {
            EXPECT_EQ(y, 3.5f);
          }
          if (std::isnan(x)) {
            EXPECT_TRUE(std::isnan(y));
          }
        }
      }
    }
  }
}

TEST(GradCompressCuda, MisalignedBuffersAndNothingWrittenOutsideThem) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream stream = current_stream(gpu);
  for (DType half : {DType::F16, DType::BF16}) {
    for (int64_t n : {int64_t(5), int64_t(31), int64_t(4099)}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(half) << " n " << n);
      const std::vector<float> g = gradients(n, 7 + static_cast<uint64_t>(n));
      std::vector<float> padded = {123.0f};
      padded.insert(padded.end(), g.begin(), g.end());
      const Tensor src = Tensor::from_vector(padded, {n + 1}, gpu);  // data starts at element 1
      // Destination of n + 2 halves filled with 7.0, written from element 1.
      const Tensor wire = Tensor::full({n + 2}, 7.0, half).to(gpu);
      kernels::grad_compress_cuda(src.data<float>() + 1, static_cast<uint16_t*>(wire.data_ptr()) + 1, half, n, 3,
                                  stream.handle());
      stream.synchronize();
      const std::vector<uint16_t> bits = host_bits(wire);
      std::vector<uint16_t> want(static_cast<size_t>(n));
      kernels::grad_compress_cpu(g.data(), want.data(), half, n, 3);
      const uint16_t seven = half == DType::F16 ? 0x4700 : 0x40e0;
      EXPECT_EQ(bits.front(), seven);
      EXPECT_EQ(bits.back(), seven);
      EXPECT_TRUE(same_halves(std::vector<uint16_t>(bits.begin() + 1, bits.end() - 1), want, half, &g));
      // Widening from an odd offset into an odd offset, with guards.
      const Tensor out = Tensor::full({n + 2}, -2.0, DType::F32).to(gpu);
      kernels::grad_decompress_cuda(static_cast<const uint16_t*>(wire.data_ptr()) + 1, half, out.data<float>() + 1,
                                    n, stream.handle());
      stream.synchronize();
      const std::vector<float> o = out.to_vector<float>();
      std::vector<float> want_f(static_cast<size_t>(n));
      kernels::grad_decompress_cpu(want.data(), half, want_f.data(), n);
      EXPECT_EQ(o.front(), -2.0f);
      EXPECT_EQ(o.back(), -2.0f);
      EXPECT_TRUE(same_floats(std::vector<float>(o.begin() + 1, o.end() - 1), want_f));
    }
  }
}

TEST(GradCompressCuda, EmptyBuffersAndBadArguments) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream stream = current_stream(gpu);
  // n = 0 launches nothing and touches nothing.
  kernels::grad_compress_cuda(nullptr, nullptr, DType::F16, 0, 2, stream.handle());
  kernels::grad_decompress_cuda(nullptr, DType::BF16, nullptr, 0, stream.handle());
  stream.synchronize();
  const Tensor src = Tensor::full({4}, 1.0, DType::F32).to(gpu);
  const Tensor wire = Tensor::empty({4}, DType::F16, gpu);
  EXPECT_NE(kestrel::testing::error_of([&] {
              kernels::grad_compress_cuda(src.data<float>(), wire.data_ptr(), DType::F16, 4, 0, stream.handle());
            }).find("world size must be at least 1"),
            std::string::npos);
  EXPECT_NE(kestrel::testing::error_of([&] {
              kernels::grad_compress_cuda(src.data<float>(), wire.data_ptr(), DType::F32, 4, 2, stream.handle());
            }).find("compresses to f16 or bf16"),
            std::string::npos);
  EXPECT_NE(kestrel::testing::error_of([&] {
              kernels::grad_decompress_cuda(wire.data_ptr(), DType::I32, src.data<float>(), 4, stream.handle());
            }).find("decompresses f16 or bf16"),
            std::string::npos);
}
