#include "kernels/strided_index.h"

#include <limits>

#include "base/error.h"

namespace kestrel::kernels {

void coalesce(StridedLayout& a, StridedLayout& b) {
  KESTREL_CHECK(a.rank == b.rank, "coalesce: layouts of rank ", a.rank, " and ", b.rank);
  int out = 0;
  for (int d = 0; d < a.rank; ++d) {
    KESTREL_CHECK(a.shape[d] == b.shape[d], "coalesce: the layouts' shapes differ in dimension ", d);
    const int64_t n = a.shape[d];
    if (n == 1) continue;
    if (out > 0 && a.stride[out - 1] == a.stride[d] * n && b.stride[out - 1] == b.stride[d] * n) {
      a.shape[out - 1] *= n;
      b.shape[out - 1] *= n;
      a.stride[out - 1] = a.stride[d];
      b.stride[out - 1] = b.stride[d];
      continue;
    }
    a.shape[out] = b.shape[out] = n;
    a.stride[out] = a.stride[d];
    b.stride[out] = b.stride[d];
    ++out;
  }
  for (int d = out; d < a.rank; ++d) a.shape[d] = b.shape[d] = a.stride[d] = b.stride[d] = 0;
  a.rank = b.rank = out;
}

IntDivider::IntDivider(uint32_t d) : divisor(d) {
  KESTREL_CHECK(d >= 1 && d <= (1u << 31), "IntDivider: divisor ", d, " outside [1, 2^31]");
  while ((uint64_t{1} << shift) < d) ++shift;
  const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1;
  KESTREL_CHECK(m <= std::numeric_limits<uint32_t>::max(), "IntDivider: magic of ", d, " overflows");
  magic = static_cast<uint32_t>(m);
}

bool make_indexer32(const StridedLayout& src, const StridedLayout& dst, StridedIndexer32& out) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (src.numel() == 0 || src.numel() >= kLimit) return false;
  for (const StridedLayout* l : {&src, &dst}) {
    const ByteRange r = byte_range(*l, 1);  // in elements
    if (r.begin < -kLimit || r.end > kLimit) return false;
  }
  out.rank = src.rank;
  for (int d = 0; d < src.rank; ++d) {
    out.size[d] = IntDivider(static_cast<uint32_t>(src.shape[d]));
    out.src_stride[d] = static_cast<int32_t>(src.stride[d]);
    out.dst_stride[d] = static_cast<int32_t>(dst.stride[d]);
  }
  return true;
}

}  // namespace kestrel::kernels
