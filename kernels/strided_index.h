// Cheaper element indexing for strided copies. StridedLayout::offset_of divides a 64-bit index by
// every dimension's size (tens of instructions each on a GPU, which has no 64-bit divider), and a
// copy does that twice, for the source and the destination. Here:
// - coalesce() merges the dimensions that both layouts walk as one, so fewer divisions remain
//   (the Detect head's permute [B, ny, nx, na, no] -> [B, na, ny, nx, no] needs three);
// - StridedIndexer32 computes both offsets from one set of 32-bit divisions, each a multiply-high
//   and a shift by a precomputed magic number, when the element count and every offset fit.
#pragma once
#include <cstdint>

#include "kernels/copy.h"

namespace kestrel::kernels {

// Drops size-1 dimensions and merges neighbours d, d+1 that both layouts traverse as one
// (stride[d] == stride[d+1] * shape[d+1] in each); both layouts must have the same shape, and keep
// one. Element i of the result is element i of the input in both layouts.
void coalesce(StridedLayout& a, StridedLayout& b);

// n / d as ((n * magic) >> 32 + n) >> shift (Granlund and Montgomery; PyTorch's IntDivider):
// exact for every n below 2^31 and divisor in [1, 2^31].
struct IntDivider {
  uint32_t divisor = 1, magic = 0, shift = 0;
  IntDivider() = default;
  explicit IntDivider(uint32_t d);
  KESTREL_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (t + n) >> shift;
  }
};

// Source and destination offsets of element i (row-major in the shared shape) in 32-bit arithmetic.
struct StridedIndexer32 {
  int rank = 0;
  IntDivider size[kMaxDims];
  int32_t src_stride[kMaxDims] = {}, dst_stride[kMaxDims] = {};
  KESTREL_HD void offsets(uint32_t i, int32_t& src, int32_t& dst) const {
    src = 0;
    dst = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const uint32_t q = size[d].div(i);
      const auto r = static_cast<int32_t>(i - q * size[d].divisor);
      src += r * src_stride[d];
      dst += r * dst_stride[d];
      i = q;
    }
  }
};

// Fills `out` for a copy between these layouts (same shape) and returns true when 32-bit indexing
// is exact: fewer than 2^31 elements, and every offset either layout reaches within int32 (the
// partial sums of offsets() lie between a layout's lowest and highest offset, so they fit too).
bool make_indexer32(const StridedLayout& src, const StridedLayout& dst, StridedIndexer32& out);

}  // namespace kestrel::kernels
