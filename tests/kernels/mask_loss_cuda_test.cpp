// The CUDA mask loss (kernels/mask_loss.cu, through ops::mask_loss) against the CPU reference:
// per-positive losses and the gradients w.r.t. coefficients and prototypes, for float32 and
// bfloat16 storage (the CPU computing in float64 on the same rounded values), overlap and
// per-target masks (uint8 and float32, at the prototypes' size and resized), many positives per
// image and rows shared by several of them; repeated runs give the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "engine/ops/mask_loss.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

const Device kGpu = Device::cuda(0);

// 3 images of 40x48 prototypes, nm 32, coefficients at column 8 of (200, 45) rows; 90 positives
// sorted by image and row, every third sharing its predecessor's row; masks (gh, gw).
struct Case {
  int64_t B = 3, mh = 40, mw = 48, nm = 32, R = 200, C = 45, column = 8;
  bool overlap = false;
  std::vector<int32_t> coef_row, image, gt_row;
  std::vector<float> box, area, gt_label;
  Tensor coef, protos, masks;
};

Case make_case(bool overlap, int64_t gh, int64_t gw, DType mask_dtype) {
  Case c;
  c.overlap = overlap;
  const int64_t P = 90;
  const std::vector<double> u = random_tensor({P, 4}, 17, DType::F64, 0, 1).to_vector<double>();
  int32_t row = 0;
  for (int64_t p = 0; p < P; ++p) {
    const int32_t img = static_cast<int32_t>(p * c.B / P);
    row = p % 3 == 2 ? row : std::max<int32_t>(row + 1, img * 60);
    c.coef_row.push_back(row);
    c.image.push_back(img);
    const float x = float(u[4 * p] * c.mw), y = float(u[4 * p + 1] * c.mh);
    const float w = float(2 + u[4 * p + 2] * 30), h = float(2 + u[4 * p + 3] * 25);
    c.box.insert(c.box.end(), {x - w / 2, y - h / 2, x + w / 2, y + h / 2});
    c.area.push_back(w * h / float(c.mw * c.mh));
    c.gt_row.push_back(overlap ? img : static_cast<int32_t>(p));
    c.gt_label.push_back(overlap ? float(1 + p % 5) : 0.0f);
  }
  c.coef = random_tensor({c.R, c.C}, 5, DType::F64, -0.5, 0.5);
  c.protos = random_tensor({c.B, c.mh, c.mw, c.nm}, 6, DType::F64, -1, 1);
  std::vector<double> m = random_tensor({overlap ? c.B : P, gh, gw}, 7, DType::F64, 0, 1)
                              .to_vector<double>();
  for (double& v : m) v = overlap ? std::floor(v * 6) : (v < 0.4 ? 0.0 : 1.0);
  c.masks = Tensor::from_vector(m, {overlap ? c.B : P, gh, gw}).to(mask_dtype);
  return c;
}

ops::MaskPositives positives_on(const Case& c, Device d) {
  const int64_t P = static_cast<int64_t>(c.image.size());
  return {Tensor::from_vector(c.coef_row, {P}).to(d), Tensor::from_vector(c.image, {P}).to(d),
          Tensor::from_vector(c.box, {P, 4}).to(d),   Tensor::from_vector(c.area, {P}).to(d),
          Tensor::from_vector(c.gt_row, {P}).to(d),   Tensor::from_vector(c.gt_label, {P}).to(d)};
}

struct Result {
  Tensor loss, dcoef, dprotos;  // on the CPU
};

// Forward, then backward with a fixed per-positive gradient.
Result run(const Case& c, const Tensor& coef_in, const Tensor& protos_in, Device d) {
  const Tensor coef = coef_in.to(d).detach().set_requires_grad();
  const Tensor protos = protos_in.to(d).detach().set_requires_grad();
  const Tensor loss =
      ops::mask_loss(coef, c.column, protos, positives_on(c, d), c.masks.to(d), c.overlap);
  const int64_t P = loss.numel();
  loss.backward(random_tensor({P}, 9, DType::F64, 0.5, 1.5).to(loss.dtype()).to(d));
  return {loss.to(Device::cpu()), coef.grad().to(Device::cpu()), protos.grad().to(Device::cpu())};
}

}  // namespace

TEST(MaskLossCuda, MatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (bool overlap : {false, true}) {
    for (auto [gh, gw, mask_dtype] : {std::tuple<int64_t, int64_t, DType>{40, 48, DType::U8},
                                      {80, 96, DType::F32},
                                      {57, 33, DType::U8}}) {
      for (DType dtype : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(::testing::Message() << "overlap " << overlap << ", masks " << gh << "x" << gw
                                          << " " << dtype_name(mask_dtype) << ", "
                                          << dtype_name(dtype));
        const Case c = make_case(overlap, gh, gw, mask_dtype);
        // The CPU sees the values the device stores, in float64.
        const Tensor coef = c.coef.to(dtype).to(DType::F64);
        const Tensor protos = c.protos.to(dtype).to(DType::F64);
        const Result cpu = run(c, coef, protos, Device::cpu());
        const Result gpu = run(c, coef.to(dtype), protos.to(dtype), kGpu);
        EXPECT_EQ(gpu.loss.dtype(), DType::F32);
        EXPECT_EQ(gpu.dcoef.dtype(), dtype);
        // Float sums over a crop's few hundred pixels of 32-term dot products: well within 1e-5
        // relative; bfloat16 gradients add their storage's 2^-9 rounding.
        EXPECT_TRUE(all_close(gpu.loss.to(DType::F64), cpu.loss, 1e-6, 1e-5));
        const double rtol = dtype == DType::F32 ? 1e-4 : 8e-3;
        EXPECT_TRUE(all_close(gpu.dcoef.to(DType::F64), cpu.dcoef, 1e-7, rtol));
        EXPECT_TRUE(all_close(gpu.dprotos.to(DType::F64), cpu.dprotos, 1e-7, rtol));
      }
    }
  }
}

TEST(MaskLossCuda, RepeatsBitForBit) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Case c = make_case(true, 40, 48, DType::U8);
  const Tensor coef = c.coef.to(DType::F32), protos = c.protos.to(DType::F32);
  const Result a = run(c, coef, protos, kGpu), b = run(c, coef, protos, kGpu);
  for (auto [x, y] : {std::pair{a.loss, b.loss}, {a.dcoef, b.dcoef}, {a.dprotos, b.dprotos}})
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()), 0);
}
