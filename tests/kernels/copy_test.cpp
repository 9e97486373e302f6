// Copies and fills on the CPU (kernels/copy_cpu.cpp through Tensor::copy_, contiguous() and fill_):
// every result is checked against indexing written out here.
#include "kernels/copy.h"

#include <numeric>

#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;

namespace {

// 0, 1, 2, ... in a contiguous tensor of the given shape.
Tensor iota(const Shape& shape, DType dt = DType::F64) {
  std::vector<double> v(shape_numel(shape));
  std::iota(v.begin(), v.end(), 0.0);
  return Tensor::from_vector(v, shape).to(dt);
}

}  // namespace

TEST(Copy, ContiguousOfPermutedView) {
  Tensor x = iota({2, 3, 4, 5});
  Tensor p = x.permute({0, 3, 1, 2});  // NHWC data seen as NCHW
  EXPECT_FALSE(p.is_contiguous());
  Tensor c = p.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), (Shape{2, 5, 3, 4}));
  std::vector<double> v = c.to_double_vector();
  int64_t i = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 5; ++ch)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t w = 0; w < 4; ++w) EXPECT_EQ(v[i++], ((n * 3 + h) * 4 + w) * 5 + ch);
  EXPECT_TRUE(x.contiguous().is_same(x));
}

TEST(Copy, IntoStridedSliceLeavesTheRestAlone) {
  Tensor dst = Tensor::full({6, 8}, -1.0, DType::F64);
  Tensor src = iota({3, 3});
  dst.slice(0, 1, 6, 2).slice(1, 2, 8, 2).slice(1, 0, 3).copy_(src);
  std::vector<double> v = dst.to_double_vector();
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t c = 0; c < 8; ++c) {
      const bool written = r % 2 == 1 && c >= 2 && c % 2 == 0 && c < 8;
      const double expected = written ? (r / 2) * 3 + (c - 2) / 2 : -1.0;
      EXPECT_EQ(v[r * 8 + c], expected) << "row " << r << " col " << c;
    }
  }
}

TEST(Copy, IntoPermutedDestination) {
  Tensor dst = Tensor::zeros({3, 4}, DType::F32);
  dst.transpose(0, 1).copy_(iota({4, 3}, DType::F32));
  std::vector<float> v = dst.to_vector<float>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(v[r * 4 + c], c * 3 + r);
}

TEST(Copy, StrideZeroSourceBroadcasts) {
  Tensor row = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor wide = make_view(row, {4, 3}, {0, 1}, row.storage_offset());
  Tensor c = wide.contiguous();
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  // A single element seen as a whole column, copied into a strided destination.
  Tensor dst = Tensor::zeros({3, 2}, DType::F32);
  Tensor seven = Tensor::from_vector<float>({7}, {1});
  dst.slice(1, 1, 2).copy_(make_view(seven, {3, 1}, {0, 0}, 0));
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0, 7, 0, 7, 0, 7}));
}

TEST(Copy, ConvertsDTypeOnTheWay) {
  Tensor dst = Tensor::zeros({2, 3}, DType::F32);
  dst.copy_(iota({3, 2}).transpose(0, 1));
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  Tensor ints = Tensor::zeros({4}, DType::I32);
  ints.copy_(Tensor::from_vector<double>({1.9, -1.9, 250.5, 0}, {4}));
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 250, 0}));
}

TEST(Copy, EveryElementSizeThroughTheKernel) {
  for (DType dt : {DType::U8, DType::BF16, DType::F32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = iota({3, 5, 7}, dt);
    Tensor y = x.permute({2, 0, 1}).contiguous();
    std::vector<double> v = y.to_double_vector();
    int64_t i = 0;
    for (int64_t a = 0; a < 7; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(v[i++], (b * 5 + c) * 7 + a);
  }
  kernels::StridedLayout l;
  l.rank = 1;
  l.shape[0] = 1;
  l.stride[0] = 1;
  char a[3] = {}, b[3] = {};
  EXPECT_THROW(kernels::copy_strided_cpu(3, a, l, b, l), Error);
}

TEST(Copy, Fill) {
  for (DType dt :
       {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = Tensor::empty({5, 3}, dt);
    t.fill_(2.5);
    const double expected = is_floating(dt) ? 2.5 : 2.0;
    for (double v : t.to_double_vector()) EXPECT_EQ(v, expected);
    // Only the strided slice changes.
    t.slice(1, 1, 2).fill_(9.0);
    std::vector<double> v = t.to_double_vector();
    for (int64_t i = 0; i < 15; ++i)
      EXPECT_EQ(v[i], i % 3 == 1 ? 9.0 : expected) << "element " << i;
  }
  Tensor z = Tensor::ones({4});
  z.zero_();
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>(4, 0.f)));
}

TEST(Copy, EdgeCasesAndErrors) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_THROW(a.copy_(Tensor::zeros({3, 2})), Error);
  EXPECT_THROW(a.copy_(Tensor()), Error);
  EXPECT_THROW(Tensor().fill_(1.0), Error);
  Tensor empty = Tensor::empty({0, 4});
  empty.copy_(Tensor::empty({0, 4}, DType::F64));
  empty.fill_(3.0);
  EXPECT_EQ(empty.contiguous().numel(), 0);
  Tensor s = Tensor::scalar(4.0);
  s.copy_(Tensor::scalar(-2.0, DType::F64));
  EXPECT_EQ(s.item(), -2.0);
  a.copy_(a);  // copying a tensor onto itself changes nothing
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>(6, 0.f)));
}

namespace {

kernels::StridedLayout layout(std::initializer_list<int64_t> shape,
                              std::initializer_list<int64_t> stride) {
  kernels::StridedLayout l;
  l.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) l.shape[d++] = s;
  d = 0;
  for (int64_t s : stride) l.stride[d++] = s;
  return l;
}

}  // namespace

// The overlap check behind copy_ on one device: byte ranges of contiguous, transposed, broadcast,
// negative-stride and empty layouts; overlapping views are flagged, disjoint ones and a view onto
// itself are not, interleaved ones conservatively are.
TEST(Copy, OverlapDetection) {
  using kernels::byte_range;
  EXPECT_EQ(byte_range(layout({3, 4}, {4, 1}), 4).begin, 0);
  EXPECT_EQ(byte_range(layout({3, 4}, {4, 1}), 4).end, 48);
  EXPECT_EQ(byte_range(layout({4, 3}, {1, 4}), 8).end, 96);    // a transpose reaches the same
  EXPECT_EQ(byte_range(layout({5, 2}, {0, 1}), 2).end, 4);     // stride 0: one row
  EXPECT_EQ(byte_range(layout({3}, {-2}), 4).begin, -16);      // reaches below its base
  EXPECT_EQ(byte_range(layout({3}, {-2}), 4).end, 4);
  EXPECT_TRUE(byte_range(layout({0, 4}, {4, 1}), 4).empty());
  EXPECT_EQ(byte_range(layout({}, {}), 8).end, 8);  // a scalar

  alignas(64) static char buf[4096];
  const auto row = layout({8}, {1});
  EXPECT_TRUE(kernels::copy_overlaps(buf + 4, row, buf, row, 4));        // shift by one float
  EXPECT_FALSE(kernels::copy_overlaps(buf + 32, row, buf, row, 4));      // adjacent, disjoint
  EXPECT_FALSE(kernels::copy_overlaps(buf, row, buf, row, 4));           // itself: a no-op
  EXPECT_TRUE(kernels::same_view(buf, row, buf, row));
  const auto even = layout({4, 4}, {8, 2});
  EXPECT_TRUE(kernels::copy_overlaps(buf + 4, even, buf, even, 4));      // odd vs even columns
  EXPECT_TRUE(kernels::copy_overlaps(buf, layout({4, 4}, {1, 4}), buf, layout({4, 4}, {4, 1}), 4));
  EXPECT_FALSE(kernels::copy_overlaps(buf, layout({0}, {1}), buf, row, 4));
  // Size-1 dimensions' strides do not matter to sameness.
  EXPECT_TRUE(kernels::same_view(buf, layout({1, 4}, {99, 1}), buf, layout({1, 4}, {4, 1})));
}

// Copies between overlapping views of one buffer give what a copy through a temporary would: a
// shift right and left along rows (strided, so the element-wise path), a transpose in place, and
// a contiguous shift (memmove).
TEST(Copy, OverlappingViewsCopyAsIfThroughATemporary) {
  {
    Tensor x = iota({4, 6});
    const std::vector<double> before = x.to_double_vector();
    x.slice(1, 1, 6).copy_(x.slice(1, 0, 5));  // each row shifted right by one
    const std::vector<double> v = x.to_double_vector();
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(v[r * 6], before[r * 6]);
      for (int64_t c = 1; c < 6; ++c) EXPECT_EQ(v[r * 6 + c], before[r * 6 + c - 1]) << r << "," << c;
    }
    x.slice(1, 0, 5).copy_(x.slice(1, 1, 6));  // and back
    EXPECT_EQ(x.slice(1, 0, 5).contiguous().to_double_vector(),
              iota({4, 6}).slice(1, 0, 5).contiguous().to_double_vector());
  }
  {
    Tensor x = iota({5, 5});
    x.copy_(x.transpose(0, 1));  // in-place transpose: every element read before it is written
    const std::vector<double> v = x.to_double_vector();
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(v[r * 5 + c], c * 5 + r);
  }
  {
    Tensor x = iota({10});
    x.slice(0, 2, 10).copy_(x.slice(0, 0, 8));
    EXPECT_EQ(x.to_double_vector(), (std::vector<double>{0, 1, 0, 1, 2, 3, 4, 5, 6, 7}));
  }
}
