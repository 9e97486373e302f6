// The CUDA softmax cross-entropy (kernels/cross_entropy.cu, through ops::cross_entropy) against
// the CPU reference: losses and logits' gradients for float32 (float math on both sides, the CPU
// accumulating in double: within float accuracy) and bfloat16 logits (compared with the CPU on the
// same rounded values), with and without label smoothing, at a small and an ImageNet-sized class
// count; repeated runs give the same bits; an out-of-range label on the device gives a NaN loss
// and NaN gradients for its row only.
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/ops/cross_entropy.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

const Device kGpu = Device::cuda(0);

std::vector<int64_t> labels_for(int64_t rows, int64_t classes) {
  std::vector<int64_t> y(rows);
  for (int64_t r = 0; r < rows; ++r) y[r] = (r * 31 + 7) % classes;
  return y;
}

struct Result {
  Tensor loss, grad;
};
Result run(const Tensor& logits, const std::vector<int64_t>& y, double eps) {
  const Tensor x = logits.detach().set_requires_grad();
  const Tensor labels =
      Tensor::from_vector<int64_t>(y, {static_cast<int64_t>(y.size())}).to(logits.device());
  const Tensor loss = ops::cross_entropy(x, labels, eps);
  loss.backward();
  return {loss.to(Device::cpu()), x.grad().to(Device::cpu())};
}

}  // namespace

TEST(CrossEntropyCuda, MatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (int64_t classes : {10, 1000}) {
    for (double eps : {0.0, 0.1}) {
      for (DType dtype : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(::testing::Message()
                     << classes << " classes, eps " << eps << ", " << dtype_name(dtype));
        const int64_t rows = 67;
        const std::vector<int64_t> y = labels_for(rows, classes);
        // The CPU sees the values the device stores (bfloat16 rounded), in float64.
        const Tensor host = random_tensor({rows, classes}, 40 + classes, DType::F32, -8, 8)
                                .to(dtype)
                                .to(DType::F64);
        const Result cpu = run(host, y, eps);
        const Result gpu = run(host.to(dtype).to(kGpu), y, eps);
        EXPECT_EQ(gpu.loss.dtype(), DType::F32);
        EXPECT_EQ(gpu.grad.dtype(), dtype);
        // Float sums of up to 1000 terms: relative error well under 1000 x 2^-24 (6e-5), the
        // log-sum-exp's error carrying into every softmax term; bfloat16 gradients add their
        // storage's 2^-9 rounding.
        EXPECT_NEAR(gpu.loss.item(), cpu.loss.item(), 1e-5 * (1 + cpu.loss.item()));
        const double rtol = dtype == DType::F32 ? 5e-5 : 8e-3;
        EXPECT_TRUE(all_close(gpu.grad.to(DType::F64), cpu.grad, 1e-8, rtol));
      }
    }
  }
}

TEST(CrossEntropyCuda, RepeatsBitForBit) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const std::vector<int64_t> y = labels_for(256, 1000);
  const Tensor x = random_tensor({256, 1000}, 3, DType::F32, -5, 5).to(kGpu);
  const Result a = run(x, y, 0.1), b = run(x, y, 0.1);
  EXPECT_EQ(a.loss.item(), b.loss.item());
  EXPECT_EQ(std::memcmp(a.grad.data_ptr(), b.grad.data_ptr(), a.grad.numel() * sizeof(float)), 0);
}

TEST(CrossEntropyCuda, OutOfRangeLabelGivesNanRow) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Tensor x = random_tensor({3, 4}, 5, DType::F32).to(kGpu).set_requires_grad();
  const Tensor labels = Tensor::from_vector<int64_t>({1, 4, 0}, {3}).to(kGpu);
  const Tensor rows = ops::cross_entropy_rows(x, labels, 0.0);
  const std::vector<float> r = rows.to(Device::cpu()).to_vector<float>();
  EXPECT_TRUE(std::isfinite(r[0]));
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_TRUE(std::isfinite(r[2]));
  rows.backward(Tensor::ones({3}, DType::F32, kGpu));
  const std::vector<float> g = x.grad().to(Device::cpu()).to_vector<float>();
  for (int c = 0; c < 4; ++c) {
    EXPECT_TRUE(std::isfinite(g[c])) << c;
    EXPECT_TRUE(std::isnan(g[4 + c])) << c;
  }
  // The host check names it, at the price of a copy back.
  EXPECT_NE(kestrel::testing::error_of([&] { ops::check_class_labels(labels, 4); }).find("row 1"),
            std::string::npos);
}
