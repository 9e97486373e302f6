// Gradient compression on CUDA against the CPU, bit for bit (both run kernels/grad_compress.h's
// compress_grad/decompress_grad): random gradients over fp16's range and beyond (inf), tiny
// values (subnormals), and world sizes whose division rounds.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dist/grad_compress.h"
#include "engine/tensor.h"
#include "kernels/grad_compress.h"
#include "tests/support/testing.h"

using namespace kestrel;

TEST(GradCompressCuda, MatchesTheCpuBitForBit) {
  KESTREL_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> wide(-80000.0f, 80000.0f), unit(-1.0f, 1.0f),
      tiny(-1e-6f, 1e-6f);
  std::vector<float> g;
  for (int i = 0; i < 100003; ++i) g.push_back(i % 3 == 0 ? wide(rng) : i % 3 == 1 ? unit(rng) : tiny(rng));
  g.insert(g.end(), {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, std::numeric_limits<float>::infinity(), 3.0e38f});
  const int64_t n = static_cast<int64_t>(g.size());
  const Tensor cpu_grad = Tensor::from_vector(g, {n});
  const Tensor gpu_grad = cpu_grad.to(Device::cuda(0));
  for (DType half : {DType::F16, DType::BF16}) {
    for (int world : {1, 2, 3, 8}) {
      SCOPED_TRACE(std::string(dtype_name(half)) + " world " + std::to_string(world));
      Tensor cpu_wire = Tensor::empty({n}, half), gpu_wire = Tensor::empty({n}, half, Device::cuda(0));
      dist::compress_gradients(cpu_grad, cpu_wire, world);
      dist::compress_gradients(gpu_grad, gpu_wire, world);
      const Tensor back = gpu_wire.to(Device::cpu());
      ASSERT_EQ(std::memcmp(back.data_ptr(), cpu_wire.data_ptr(), n * 2), 0);
      Tensor cpu_out = Tensor::empty({n}, DType::F32), gpu_out = Tensor::empty({n}, DType::F32, Device::cuda(0));
      dist::decompress_gradients(cpu_wire, cpu_out);
      dist::decompress_gradients(gpu_wire, gpu_out);
      const Tensor out = gpu_out.to(Device::cpu());
      ASSERT_EQ(std::memcmp(out.data_ptr(), cpu_out.data_ptr(), n * 4), 0);
    }
  }
}
