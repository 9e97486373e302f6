// CUDA casts against the CPU's, bit for bit, for every pair of dtypes. Both devices run the same
// convert<D, S>() from kernels/cast.h, so any difference is a device/host disagreement in a
// conversion intrinsic (rounding, subnormals, overflow to infinity). NaNs compare equal whatever
// their payload. Sources stay inside the destination's range: converting an out-of-range float to
// an integer is undefined behaviour in C++ and differs between x86 and the GPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

const DType kAll[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                      DType::I32, DType::I64, DType::U8};

bool is_int(DType t) { return !is_floating(t); }

// Random values over the range both dtypes can hold, plus the edge cases of that range.
std::vector<double> source_values(DType from, DType to) {
  std::mt19937_64 rng(31);
  std::vector<double> v;
  auto uniform = [&](double lo, double hi, int n) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (int i = 0; i < n; ++i) v.push_back(d(rng));
  };
  if (from == DType::U8 || to == DType::U8) {
    uniform(0, 250, 3000);  // bfloat16 rounds nothing here past 250
    v.insert(v.end(), {0, 1, 0.5, 127.5, 249.5, 250});
  } else if (is_int(from) || is_int(to)) {
    uniform(-30000, 30000, 3000);
    uniform(-2, 2, 500);
    v.insert(v.end(), {0.0, -0.0, 1.5, -1.5, 2.5, -2.5, 0.999});
    if (is_int(from) && !is_int(to)) {
      // Integers past float's 24-bit significand round to nearest even on the way.
      v.insert(v.end(), {16777217, 16777219, -16777217, 2147483647, -2147483647 - 1.0});
      if (from == DType::I64) v.insert(v.end(), {std::ldexp(1.0, 40) + 1, -std::ldexp(1.0, 62)});
    }
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    uniform(-70000, 70000, 2000);
    uniform(-1, 1, 1000);
    uniform(-1e-5, 1e-5, 500);  // float16 subnormals
    v.insert(
        v.end(),
        {0.0, -0.0, inf, -inf, std::nan(""), 65504, 65520, 65536, 3.0e38, 1e300, 1e-40, -1e-45,
         6e-8, 1e-8, 1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8), 1 + std::ldexp(1.0, -11),
         1 + 3 * std::ldexp(1.0, -11), 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)});
  }
  return v;
}

// A CPU tensor of dtype t holding `values` (written element by element, not through a cast).
Tensor make(const std::vector<double>& values, DType t) {
  Tensor out = Tensor::empty({static_cast<int64_t>(values.size())}, t);
  for (size_t i = 0; i < values.size(); ++i) store_from_double(out.data_ptr(), t, i, values[i]);
  return out;
}

// Index of the first element whose bytes differ (NaN matching NaN), or -1.
int64_t first_difference(const Tensor& a, const Tensor& b) {
  const size_t es = a.element_size();
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) == 0) continue;
    if (is_floating(a.dtype()) && std::isnan(load_as_double(pa, a.dtype(), i)) &&
        std::isnan(load_as_double(pb, b.dtype(), i)))
      continue;
    return i;
  }
  return -1;
}

}  // namespace

TEST(CastCuda, EveryPairMatchesTheCpuBitForBit) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType from : kAll) {
    for (DType to : kAll) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      std::vector<double> values = source_values(from, to);
      Tensor src = make(values, from);
      Tensor want = src.to(to);
      Tensor got = src.to(gpu).to(to).to(Device::cpu());
      ASSERT_EQ(got.dtype(), to);
      const int64_t i = first_difference(got, want);
      EXPECT_EQ(i, -1) << "source " << load_as_double(src.data_ptr(), from, i < 0 ? 0 : i)
                       << ": cuda " << load_as_double(got.data_ptr(), to, i < 0 ? 0 : i) << ", cpu "
                       << load_as_double(want.data_ptr(), to, i < 0 ? 0 : i);
    }
  }
}

TEST(CastCuda, NonContiguousDeviceSource) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor h =
      make(source_values(DType::F32, DType::BF16), DType::F32).slice(0, 0, 3000).reshape({30, 100});
  Tensor view = h.to(gpu).transpose(0, 1).slice(0, 1, 100, 3);
  Tensor got = view.to(DType::BF16).to(Device::cpu());
  Tensor want = h.transpose(0, 1).slice(0, 1, 100, 3).to(DType::BF16);
  EXPECT_EQ(first_difference(got, want), -1);
}
