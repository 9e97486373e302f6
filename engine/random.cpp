#include "engine/random.h"

#include <cmath>

#include "engine/ops/launch.h"
#include "kernels/random.h"

namespace kestrel {

void Generator::set_offset(uint64_t offset) {
  offset_ = offset;
  lane_ = 4;
}

void Generator::fill_uniform(const Tensor& t, double lo, double hi) {
  KESTREL_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi,
                "Generator::fill_uniform: needs finite lo <= hi, got [", lo, ", ", hi, ")");
  const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
  const float scale = static_cast<float>(static_cast<double>(hi_f) - static_cast<double>(lo_f));
  KESTREL_CHECK(std::isfinite(lo_f) && std::isfinite(hi_f) && std::isfinite(scale),
                "Generator::fill_uniform: [", lo, ", ", hi,
                ") does not fit in float32 (values and width must stay below 3.4e38)");
  // The largest float below hi caps values that round up to hi; an empty range gives lo.
  const float top = lo_f < hi_f ? std::nextafter(hi_f, lo_f) : lo_f;
  fill(t, "fill_uniform", false, {lo_f, scale, top}, 0.0f, 0.0f);
}

void Generator::fill_normal(const Tensor& t, double mean, double std) {
  const float mean_f = static_cast<float>(mean), std_f = static_cast<float>(std);
  KESTREL_CHECK(std::isfinite(mean_f) && std::isfinite(std_f) && std >= 0,
                "Generator::fill_normal: needs a finite mean and a finite std >= 0 (in float32 "
                "range), got mean ",
                mean, ", std ", std);
  fill(t, "fill_normal", true, {}, mean_f, std_f);
}

void Generator::fill(const Tensor& t, const char* what, bool normal, philox::UniformParams u,
                     float mean, float stddev) {
  KESTREL_CHECK(t.defined(), "Generator::", what, ": the tensor is undefined");
  KESTREL_CHECK(t.dtype() == DType::F32, "Generator::", what, ": fills float32 tensors, got ",
                t.describe(), "; fill a float32 tensor and convert it with .to(dtype)");
  // A view is filled through a contiguous buffer so element i is always the i-th in row-major
  // order, whatever the strides.
  Tensor dst = t.is_contiguous() ? t : Tensor::empty(t.shape(), DType::F32, t.device());
  const int64_t n = t.numel();
  const kernels::PhiloxPosition at{seed_, stream_, offset_};
  float* out = dst.data<float>();
  ops::launch(
      t.device(),
      [&] {
        if (normal)
          kernels::normal_cpu(at, mean, stddev, out, n);
        else
          kernels::uniform_cpu(at, u, out, n);
      },
      [&](cudaStream_t s) {
        if (normal)
          kernels::normal_cuda(at, mean, stddev, out, n, s);
        else
          kernels::uniform_cuda(at, u, out, n, s);
      });
  if (!dst.is_same(t)) t.copy_(dst);
  offset_ += kernels::philox_blocks_for(n);
  lane_ = 4;
}

uint32_t Generator::next_u32() {
  if (lane_ == 4) {
    block_ = philox::block_at(seed_, stream_, offset_);
    ++offset_;
    lane_ = 0;
  }
  return block_.v[lane_++];
}

uint64_t Generator::next_u64() {
  const uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::uniform(double lo, double hi) {
  KESTREL_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && std::isfinite(hi - lo),
                "Generator::uniform: needs finite lo <= hi, got [", lo, ", ", hi, ")");
  const double v = lo + (hi - lo) * uniform();
  return v < hi || lo == hi ? v : std::nextafter(hi, lo);
}

uint64_t Generator::randint(uint64_t n) {
  KESTREL_CHECK(n > 0, "Generator::randint: needs n > 0 to draw from [0, n)");
  // Rejecting the lowest 2^64 mod n values leaves a multiple of n equally likely values.
  const uint64_t threshold = (0 - n) % n;
  while (true) {
    const uint64_t r = next_u64();
    if (r >= threshold) return r % n;
  }
}

}  // namespace kestrel
