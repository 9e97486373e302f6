#include <cstring>

#include "kernels/copy.h"
#include "kernels/error.h"

namespace kestrel::kernels {
namespace {

template <class U>
void copy_typed(const U* src, const StridedLayout& sl, U* dst, const StridedLayout& dl) {
  const int64_t n = sl.numel();
  for (int64_t i = 0; i < n; ++i) dst[dl.offset_of(i)] = src[sl.offset_of(i)];
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

void fill_cpu(void* data, DType t, int64_t n, double value) {
  if (n == 0) return;
  store_from_double(data, t, 0, value);
  const size_t es = dtype_size(t);
  auto* bytes = static_cast<unsigned char*>(data);
  for (int64_t i = 1; i < n; ++i) std::memcpy(bytes + i * es, bytes, es);
}

}  // namespace kestrel::kernels
