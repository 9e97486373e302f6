// Gradient compression on CUDA against the CPU, bit for bit (both run kernels/grad_compress.h's
// compress_grad/decompress_grad, the CPU's fp16 through F16C where it can): random gradients over
// fp16's range and beyond (inf), tiny values (subnormals), and world sizes whose division rounds;
// then a Reducer step on CUDA parameters, equal to the same step on the CPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dist/grad_compress.h"
#include "engine/tensor.h"
#include "kernels/grad_compress.h"
#include "tests/dist/reducer_compress_rig.h"
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

TEST(GradCompressCuda, AReducerStepOnCudaEqualsTheCpuStep) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const dist::testing::GradFn grad = [](int r, int j, int64_t i) {
    return std::sin(1.0 + r * 7 + j * 3 + i * 0.37) * (i == 5 && r == 0 ? 1e5 : 1.0);
  };
  for (dist::GradCompress c : {dist::GradCompress::F16, dist::GradCompress::BF16}) {
    SCOPED_TRACE(dist::grad_compress_name(c));
    const auto cpu = dist::testing::reduce_once(2, c, grad);
    const auto gpu = dist::testing::reduce_once(2, c, grad, DType::F32, Device::cuda(0));
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < dist::testing::kParams; ++j)
        for (int64_t i = 0; i < dist::testing::kN; ++i)
          ASSERT_EQ(gpu[r][j][i], cpu[r][j][i]) << "rank " << r << " w" << j << "[" << i << "]";
  }
}
