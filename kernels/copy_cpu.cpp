#include <cstring>

#include "base/error.h"
#include "kernels/copy.h"
#include "kernels/strided_index.h"

namespace kestrel::kernels {
namespace {

// Walks the shape with a multi-index counter (no division per element): the innermost
// dimension is a strided inner loop, the outer ones advance like an odometer. Dimensions both
// layouts walk as one are merged first, for longer inner loops.
template <class U>
void copy_typed(const U* src, StridedLayout sl, U* dst, StridedLayout dl) {
  if (sl.numel() == 0) return;
  coalesce(sl, dl);
  if (sl.rank == 0) {
    dst[0] = src[0];
    return;
  }
  const int last = sl.rank - 1;
  const int64_t inner = sl.shape[last], ss = sl.stride[last], ds = dl.stride[last];
  int64_t index[kMaxDims] = {};
  int64_t so = 0, dof = 0;
  const int64_t rows = sl.numel() / inner;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < inner; ++j) dst[dof + j * ds] = src[so + j * ss];
    for (int d = last - 1; d >= 0; --d) {  // odometer step over the outer dimensions
      so += sl.stride[d];
      dof += dl.stride[d];
      if (++index[d] < sl.shape[d]) break;
      so -= sl.stride[d] * sl.shape[d];
      dof -= dl.stride[d] * dl.shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace

void copy_strided_cpu(size_t elem_size, const void* src, const StridedLayout& sl, void* dst,
                      const StridedLayout& dl) {
  switch (elem_size) {
    case 1: return copy_typed(static_cast<const uint8_t*>(src), sl, static_cast<uint8_t*>(dst), dl);
    case 2: return copy_typed(static_cast<const uint16_t*>(src), sl, static_cast<uint16_t*>(dst), dl);
    case 4: return copy_typed(static_cast<const uint32_t*>(src), sl, static_cast<uint32_t*>(dst), dl);
    case 8: return copy_typed(static_cast<const uint64_t*>(src), sl, static_cast<uint64_t*>(dst), dl);
  }
  KESTREL_FAIL("copy_strided_cpu: unsupported element size ", elem_size);
}

ByteRange byte_range(const StridedLayout& l, size_t elem_size) {
  if (l.numel() == 0) return {};
  int64_t lo = 0, hi = 0;  // element offsets of the lowest and highest element
  for (int d = 0; d < l.rank; ++d) {
    const int64_t reach = (l.shape[d] - 1) * l.stride[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto es = static_cast<int64_t>(elem_size);
  return {lo * es, (hi + 1) * es};
}

bool same_view(const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb) {
  if (a != b || la.rank != lb.rank) return false;
  for (int d = 0; d < la.rank; ++d)
    if (la.shape[d] != lb.shape[d] || (la.shape[d] > 1 && la.stride[d] != lb.stride[d]))
      return false;
  return true;
}

bool copy_overlaps(const void* dst, const StridedLayout& dl, const void* src,
                   const StridedLayout& sl, size_t elem_size) {
  const ByteRange d = byte_range(dl, elem_size), s = byte_range(sl, elem_size);
  if (d.empty() || s.empty() || same_view(dst, dl, src, sl)) return false;
  const auto d0 = reinterpret_cast<intptr_t>(dst), s0 = reinterpret_cast<intptr_t>(src);
  return d0 + d.begin < s0 + s.end && s0 + s.begin < d0 + d.end;
}

void fill_cpu(void* data, DType t, int64_t n, double value) {
  if (n == 0) return;
  store_from_double(data, t, 0, value);
  const size_t es = dtype_size(t);
  auto* bytes = static_cast<unsigned char*>(data);
  for (int64_t i = 1; i < n; ++i) std::memcpy(bytes + i * es, bytes, es);
}

}  // namespace kestrel::kernels
