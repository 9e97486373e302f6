// dtype casts on the CPU (kernels/cast_cpu.cpp through Tensor::to): every pair of dtypes, float to
// integer truncation, round-to-nearest-even into the half types on known ties, and uint8's range.
#include "kernels/cast.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

const DType kAll[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                      DType::I32, DType::I64, DType::U8};

// A tensor of dtype t holding `values`, written element by element (not through a cast).
Tensor make(const std::vector<double>& values, DType t) {
  Tensor out = Tensor::empty({static_cast<int64_t>(values.size())}, t);
  for (size_t i = 0; i < values.size(); ++i) store_from_double(out.data_ptr(), t, i, values[i]);
  return out;
}

std::string pair_name(DType from, DType to) {
  return std::string(dtype_name(from)) + " -> " + dtype_name(to);
}

// Raw bits of a 2-byte element, for checking the exact half-type encoding.
uint16_t bits16(const Tensor& t, int64_t i) {
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(t.data_ptr()) + 2 * i, 2);
  return b;
}

}  // namespace

// Values every dtype holds exactly survive every cast and the way back.
TEST(Cast, EveryPairRoundTripsExactValues) {
  const std::vector<double> unsigned_values = {0, 1, 2, 3, 7, 100, 127, 128, 255};
  const std::vector<double> signed_values = {-128, -100, -7, -1, 0, 1, 5, 127, 255};
  for (DType from : kAll) {
    for (DType to : kAll) {
      SCOPED_TRACE(pair_name(from, to));
      const bool has_u8 = from == DType::U8 || to == DType::U8;
      const std::vector<double>& v = has_u8 ? unsigned_values : signed_values;
      Tensor src = make(v, from);
      Tensor dst = src.to(to);
      EXPECT_EQ(dst.dtype(), to);
      EXPECT_EQ(dst.to_double_vector(), v);
      EXPECT_EQ(dst.to(from).to_double_vector(), v);
    }
  }
}

TEST(Cast, KernelConvertsEveryPairInPlaceOfTensorTo) {
  const std::vector<double> v = {0, 1, 42, 200};
  for (DType from : kAll) {
    for (DType to : kAll) {
      SCOPED_TRACE(pair_name(from, to));
      Tensor src = make(v, from), dst = Tensor::empty({4}, to);
      kernels::cast_cpu(src.data_ptr(), from, dst.data_ptr(), to, 4);
      EXPECT_EQ(dst.to_double_vector(), v);
    }
  }
}

TEST(Cast, FloatToIntegerTruncatesTowardZero) {
  // Every float format holds these exactly, so only the cast itself drops the fraction.
  const std::vector<double> v = {2.75, -2.75, 0.5, -0.5, 100.5, -100.5, 0.0};
  const std::vector<double> truncated = {2, -2, 0, 0, 100, -100, 0};
  for (DType from : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    Tensor src = make(v, from);
    for (DType to : {DType::I32, DType::I64}) {
      SCOPED_TRACE(pair_name(from, to));
      EXPECT_EQ(src.to(to).to_double_vector(), truncated);
    }
    Tensor u = make({100.5, 0.75, 255.0}, from).to(DType::U8);
    EXPECT_EQ(u.to_double_vector(), (std::vector<double>{100, 0, 255}));
  }
}

// bfloat16 keeps 7 fraction bits, float16 10: on an exact tie the even neighbour wins, just past
// a tie the value rounds up.
TEST(Cast, FloatToHalfRoundsToNearestEven) {
  const double b = std::ldexp(1.0, -8);   // half a bfloat16 ulp at 1
  const double h = std::ldexp(1.0, -11);  // half a float16 ulp at 1
  Tensor xb =
      make({1 + b, 1 + 3 * b, 1 + b + std::ldexp(1.0, -20), -(1 + b), 1 + 5 * b}, DType::F32);
  EXPECT_EQ(xb.to(DType::BF16).to_double_vector(),
            (std::vector<double>{1, 1 + 4 * b, 1 + 2 * b, -1, 1 + 4 * b}));
  Tensor xh =
      make({1 + h, 1 + 3 * h, 1 + h + std::ldexp(1.0, -20), -(1 + h), 1 + 5 * h}, DType::F32);
  EXPECT_EQ(xh.to(DType::F16).to_double_vector(),
            (std::vector<double>{1, 1 + 4 * h, 1 + 2 * h, -1, 1 + 4 * h}));
  // Known encodings: 1.0 and -2.0 in each format.
  Tensor e = make({1.0, -2.0}, DType::F32);
  EXPECT_EQ(bits16(e.to(DType::BF16), 0), 0x3F80);
  EXPECT_EQ(bits16(e.to(DType::BF16), 1), 0xC000);
  EXPECT_EQ(bits16(e.to(DType::F16), 0), 0x3C00);
  EXPECT_EQ(bits16(e.to(DType::F16), 1), 0xC000);
}

// A float64 value just past a half-type tie must round up. Going through float first rounds it
// onto the tie (float keeps 23 fraction bits) and then to even: a double rounding.
TEST(Cast, DoubleToHalfRoundsOnce) {
  const double past_tie_b = 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  const double past_tie_h = 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor x = make({past_tie_b, past_tie_h}, DType::F64);
  EXPECT_EQ(x.to(DType::BF16).to_double_vector()[0], 1 + std::ldexp(1.0, -7));
  EXPECT_EQ(x.to(DType::F16).to_double_vector()[1], 1 + std::ldexp(1.0, -10));
  // Fills store through a single rounding; a cast of the same value must agree with them.
  EXPECT_EQ(Tensor::full({1}, past_tie_b, DType::BF16).item(),
            x.to(DType::BF16).to_double_vector()[0]);
}

TEST(Cast, SpecialFloatValues) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = make({inf, -inf, std::nan(""), -0.0, 65520.0, 1e-40}, DType::F32);
  for (DType to : {DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(to));
    std::vector<double> y = x.to(to).to_double_vector();
    EXPECT_EQ(y[0], inf);
    EXPECT_EQ(y[1], -inf);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_TRUE(y[3] == 0.0 && std::signbit(y[3]));
  }
  // 65520 is the tie between float16's largest finite value and the next power of two: even -> inf.
  EXPECT_EQ(x.to(DType::F16).to_double_vector()[4], inf);
  EXPECT_EQ(x.to(DType::BF16).to_double_vector()[4], 65536.0);
  // A float subnormal: bfloat16 shares float's exponent range and keeps it; for float16 it is far
  // below the smallest subnormal (2^-24) and rounds to 0.
  const double kept = x.to(DType::BF16).to_double_vector()[5];
  EXPECT_GT(kept, 0.0);
  EXPECT_LT(kept, 2e-40);
  EXPECT_EQ(x.to(DType::F16).to_double_vector()[5], 0.0);
}

TEST(Cast, Uint8FullRange) {
  std::vector<double> v(256);
  for (int i = 0; i < 256; ++i) v[i] = i;
  Tensor u = make(v, DType::U8);
  for (DType to : kAll) {
    SCOPED_TRACE(dtype_name(to));
    EXPECT_EQ(u.to(to).to_double_vector(), v);
    EXPECT_EQ(u.to(to).to(DType::U8).to_vector<uint8_t>(), u.to_vector<uint8_t>());
  }
}

TEST(Cast, LargeIntegersRoundToNearestFloat) {
  // 2^24 + 1 is a tie between two floats: even (2^24) wins; 2^24 + 3 rounds up to 2^24 + 4.
  Tensor i = make({16777217.0, 16777219.0, -16777217.0}, DType::I32);
  EXPECT_EQ(i.to(DType::F32).to_double_vector(),
            (std::vector<double>{16777216, 16777220, -16777216}));
  EXPECT_EQ(i.to(DType::F64).to_double_vector(),
            (std::vector<double>{16777217, 16777219, -16777217}));
  Tensor l = Tensor::from_vector<int64_t>({(int64_t{1} << 40) + 1, -(int64_t{1} << 50)}, {2});
  EXPECT_EQ(l.to(DType::F64).to_double_vector(),
            (std::vector<double>{std::ldexp(1.0, 40) + 1, -std::ldexp(1.0, 50)}));
}

TEST(Cast, NonContiguousSourceAndSameDType) {
  Tensor x = Tensor::from_vector<float>({1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, {2, 3});
  Tensor t = x.transpose(0, 1).to(DType::F64);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_double_vector(), (std::vector<double>{1.5, 4.5, 2.5, 5.5, 3.5, 6.5}));
  EXPECT_TRUE(x.to(DType::F32).is_same(x));
  EXPECT_EQ(x.to(DType::I32).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
}
