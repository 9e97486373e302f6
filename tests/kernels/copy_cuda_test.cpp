// Copies and fills on CUDA (kernels/copy.cu and Tensor::copy_'s host<->device paths) against the
// CPU. Copies move bits, so every comparison is exact.
#include <cstring>

#include "engine/stream.h"
#include "engine/tensor.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;

namespace {

const DType kAll[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                      DType::I32, DType::I64, DType::U8};

// Values that every dtype holds exactly (uint8 included): i mod 251.
Tensor pattern(const Shape& shape, DType dt) {
  std::vector<double> v(shape_numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 251);
  return Tensor::from_vector(v, shape).to(dt);
}

::testing::AssertionResult same(const Tensor& a, const Tensor& b) { return all_close(a, b, 0, 0); }

// Byte-for-byte equality of two contiguous CPU tensors (tells -0 from 0 and keeps NaN payloads).
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

}  // namespace

TEST(CopyCuda, HostDeviceRoundTripEveryDType) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType dt : kAll) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = pattern({3, 17, 5}, dt);
    Tensor d = h.to(gpu);
    EXPECT_EQ(d.device(), gpu);
    EXPECT_EQ(d.dtype(), dt);
    EXPECT_TRUE(same_bytes(d.to(Device::cpu()), h));
  }
}

TEST(CopyCuda, StridedCopiesOnTheDeviceMatchTheHost) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::U8, DType::BF16, DType::F32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = pattern({2, 9, 7, 6}, dt);
    Tensor d = h.to(gpu);
    // A permute to NCHW, a strided slice with a negative start, and a stride-0 broadcast.
    EXPECT_TRUE(same(d.permute({0, 3, 1, 2}).contiguous(), h.permute({0, 3, 1, 2}).contiguous()));
    EXPECT_TRUE(same(d.slice(1, -8, 9, 3).slice(3, 1, 5).contiguous(),
                     h.slice(1, -8, 9, 3).slice(3, 1, 5).contiguous()));
    const Shape wide{4, 2, 9, 7, 6}, wide_strides{0, 378, 42, 6, 1};
    EXPECT_TRUE(same(make_view(d, wide, wide_strides, d.storage_offset()).contiguous(),
                     make_view(h, wide, wide_strides, h.storage_offset()).contiguous()));
    // A strided source into a strided destination: only the addressed elements change.
    Tensor dst_d = Tensor::full({6, 7, 9}, 3.0, dt, gpu);
    Tensor dst_h = Tensor::full({6, 7, 9}, 3.0, dt);
    dst_d.slice(2, 0, 9, 2)
        .permute({2, 0, 1})
        .copy_(d.reshape({18, 7, 6}).slice(0, 2, 7).transpose(1, 2));
    dst_h.slice(2, 0, 9, 2)
        .permute({2, 0, 1})
        .copy_(h.reshape({18, 7, 6}).slice(0, 2, 7).transpose(1, 2));
    EXPECT_TRUE(same(dst_d, dst_h));
  }
}

TEST(CopyCuda, AcrossDevicesWithLayoutAndDTypeChanges) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor h = pattern({4, 5, 6}, DType::F32);
  // Non-contiguous host source, converted to bfloat16 on the way to the device.
  Tensor d = Tensor::empty({6, 4, 5}, DType::BF16, gpu);
  d.copy_(h.permute({2, 0, 1}));
  EXPECT_TRUE(same(d, h.permute({2, 0, 1}).to(DType::BF16)));
  // Host source into a non-contiguous device destination.
  Tensor dd = Tensor::zeros({5, 4}, DType::F32, gpu);
  dd.transpose(0, 1).copy_(pattern({4, 5}, DType::F32));
  EXPECT_TRUE(same(dd, pattern({4, 5}, DType::F32).transpose(0, 1)));
  // Non-contiguous device source into a non-contiguous host destination, float32 -> int32.
  Tensor back = Tensor::full({6, 8, 1}, -1.0, DType::I32);
  back.slice(1, 0, 8, 2).copy_(h.to(gpu).reshape({6, 4, 5}).slice(2, 1, 2));
  Tensor want = Tensor::full({6, 8, 1}, -1.0, DType::I32);
  want.slice(1, 0, 8, 2).copy_(h.reshape({6, 4, 5}).slice(2, 1, 2));
  EXPECT_TRUE(same(back, want));
}

TEST(CopyCuda, NonBlockingThroughPinnedMemory) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor src = Tensor::empty({16, 64, 64, 3}, DType::U8, Device::cpu(), /*pinned=*/true);
  EXPECT_TRUE(src.is_pinned());
  src.copy_(pattern(src.shape(), DType::U8));
  Tensor d = src.to(gpu, /*non_blocking=*/true);
  // Device -> pinned host, asynchronous: values are valid once the stream has caught up.
  Tensor back = d.to(Device::cpu(), /*non_blocking=*/true);
  EXPECT_TRUE(back.is_pinned());
  current_stream(gpu).synchronize();
  EXPECT_TRUE(same_bytes(back, pattern(src.shape(), DType::U8)));
  // A pinned staging buffer may be dropped right after an asynchronous upload: its storage waits
  // for the copy before the memory is reused.
  Tensor out = Tensor::empty({1 << 20}, DType::F32, gpu);
  {
    Tensor staging = Tensor::empty({1 << 20}, DType::F32, Device::cpu(), true);
    staging.fill_(1.5);
    out.copy_(staging, /*non_blocking=*/true);
  }
  Tensor reuse = Tensor::empty({1 << 20}, DType::F32, Device::cpu(), true);
  reuse.fill_(-7.0);
  EXPECT_TRUE(same(out, Tensor::full({1 << 20}, 1.5)));
  // non_blocking with pageable memory falls back to a synchronous copy.
  Tensor pageable = pattern({1000}, DType::F32);
  Tensor p = Tensor::empty({1000}, DType::F32, gpu);
  p.copy_(pageable, true);
  EXPECT_TRUE(same(p, pageable));
}

TEST(CopyCuda, FillMatchesTheHostBitForBit) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType dt : kAll) {
    for (double value : {0.0, -0.0, 2.5, 1.0 / 3.0, 200.0}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(value));
      Tensor d = Tensor::empty({1001}, dt, gpu);
      d.fill_(value);
      EXPECT_TRUE(same_bytes(d.to(Device::cpu()), Tensor::full({1001}, value, dt)));
    }
    Tensor d = Tensor::zeros({7, 9}, dt, gpu);
    d.slice(0, 1, 7, 3).slice(1, 2, 5).fill_(4.0);
    Tensor h = Tensor::zeros({7, 9}, dt);
    h.slice(0, 1, 7, 3).slice(1, 2, 5).fill_(4.0);
    EXPECT_TRUE(same_bytes(d.to(Device::cpu()), h));
  }
}

TEST(CopyCuda, GradientsFlowBackAcrossDevices) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor x = pattern({3, 4}, DType::F32).set_requires_grad();
  Tensor y = x.to(gpu).transpose(0, 1).contiguous().to(DType::BF16);
  EXPECT_EQ(y.device(), gpu);
  y.backward(pattern({4, 3}, DType::BF16).to(gpu));
  // The gradient comes back to the host in the leaf's dtype, transposed back.
  EXPECT_EQ(x.grad().device(), Device::cpu());
  EXPECT_EQ(x.grad().dtype(), DType::F32);
  EXPECT_TRUE(same(x.grad(), pattern({4, 3}, DType::F32).transpose(0, 1)));
}

// Overlapping views of one device buffer are copied through a temporary (cudaMemcpyAsync is
// undefined for overlapping memory, and the strided kernel's threads would race): contiguous
// shifts both ways, a strided row shift and an in-place transpose equal the same copies on the
// host.
TEST(CopyCuda, OverlappingViewsOnTheDeviceMatchTheHost) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::F32, DType::F16, DType::U8}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = pattern({1 << 20}, dt), d = h.to(gpu);
    const int64_t n = 1 << 20, k = 1000;
    h.slice(0, k, n).copy_(h.slice(0, 0, n - k));
    d.slice(0, k, n).copy_(d.slice(0, 0, n - k));
    EXPECT_TRUE(same_bytes(d.to(Device::cpu()), h));
    h.slice(0, 0, n - 3).copy_(h.slice(0, 3, n));
    d.slice(0, 0, n - 3).copy_(d.slice(0, 3, n));
    EXPECT_TRUE(same_bytes(d.to(Device::cpu()), h));

    Tensor hr = pattern({64, 300}, dt), dr = hr.to(gpu);
    hr.slice(1, 1, 300).copy_(hr.slice(1, 0, 299));
    dr.slice(1, 1, 300).copy_(dr.slice(1, 0, 299));
    EXPECT_TRUE(same_bytes(dr.to(Device::cpu()), hr));

    Tensor ht = pattern({97, 97}, dt), dtr = ht.to(gpu);
    ht.copy_(ht.transpose(0, 1));
    dtr.copy_(dtr.transpose(0, 1));
    EXPECT_TRUE(same_bytes(dtr.to(Device::cpu()), ht));
  }
}

// The Detect head's permute, forward and backward, at YOLOv5s's P3 shape (batch 4, 80x80, 3
// anchors, 85 outputs): the conv's NHWC output [B, ny, nx, na * no] viewed as [B, na, ny, nx, no],
// and the gradient's way back. These copies take the 32-bit indexer (kernels/strided_index.h);
// they move bits, so they equal the host's copies byte for byte.
TEST(CopyCuda, DetectPermuteBothWaysMatchesTheHost) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t b = 4, na = 3, ny = 80, nx = 80, no = 85;
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor h = pattern({b, ny, nx, na * no}, dt);
    const Tensor d = h.to(gpu);
    auto forward = [&](const Tensor& t) {
      return t.reshape({b, ny, nx, na, no}).permute({0, 3, 1, 2, 4}).contiguous();
    };
    const Tensor fh = forward(h), fd = forward(d);
    EXPECT_TRUE(same_bytes(fd.to(Device::cpu()), fh));
    auto backward = [&](const Tensor& g) { return g.permute({0, 2, 3, 1, 4}).contiguous(); };
    EXPECT_TRUE(same_bytes(backward(fd).to(Device::cpu()), backward(fh)));
    EXPECT_TRUE(same_bytes(backward(fd).to(Device::cpu()), h.reshape({b, ny, nx, na, no})));
  }
}

// Past 2^31 elements the copy keeps 64-bit indexing: a broadcast row of 251 bytes copied into
// 8,555,711 rows (2^31 + 58 bytes); rows at the start, the middle and beyond element 2^31 hold it.
TEST(CopyCuda, CopiesPastTwoToThe31ElementsStayExact) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t row = 251, rows = 8555711;
  ASSERT_GT(row * rows, int64_t{1} << 31);
  const Tensor h = pattern({row}, DType::U8), d = h.to(gpu);
  const Tensor out = make_view(d, {rows, row}, {0, 1}, d.storage_offset()).contiguous();
  for (int64_t r : {int64_t{0}, int64_t{1}, rows / 2, (int64_t{1} << 31) / row, rows - 1})
    EXPECT_TRUE(same_bytes(out.slice(0, r, r + 1).to(Device::cpu()).reshape({row}), h)) << "row " << r;
}
