// Strided copy (the engine's contiguous(), slice assignment, permutes) and fill.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

constexpr int kMaxDims = 8;

// A view of n-d memory in elements: the shape and per-dimension strides.
struct StridedLayout {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  KESTREL_HD int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
  // Element offset of the i-th element in row-major order of `shape`.
  KESTREL_HD int64_t offset_of(int64_t i) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % shape[d]) * stride[d];
      i /= shape[d];
    }
    return off;
  }
};

// The bytes a layout reaches from its base pointer, [begin, end) relative to it; empty for a
// layout without elements. Strides may be zero (a broadcast) or negative.
struct ByteRange {
  int64_t begin = 0, end = 0;
  bool empty() const { return begin >= end; }
};
ByteRange byte_range(const StridedLayout& layout, size_t elem_size);

// Whether copying src into dst element by element (or with cudaMemcpy, undefined for overlapping
// memory) could read a value it has already overwritten: the byte ranges of the two views
// intersect and they are not one and the same view (a copy onto itself changes nothing). Views
// that interleave without sharing an element (even and odd columns) also answer true: the check
// is by range, and a staged copy is always correct.
bool copy_overlaps(const void* dst, const StridedLayout& dst_layout, const void* src,
                   const StridedLayout& src_layout, size_t elem_size);
bool same_view(const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb);

// dst[dst_layout(i)] = src[src_layout(i)] for every i; both layouts share the same shape.
// elem_size is 1, 2, 4 or 8 bytes.
void copy_strided_cpu(size_t elem_size, const void* src, const StridedLayout& src_layout, void* dst,
                      const StridedLayout& dst_layout);
void copy_strided_cuda(size_t elem_size, const void* src, const StridedLayout& src_layout, void* dst,
                       const StridedLayout& dst_layout, cudaStream_t stream);

// data[i] = value (converted to t) for i in [0, n).
void fill_cpu(void* data, DType t, int64_t n, double value);
void fill_cuda(void* data, DType t, int64_t n, double value, cudaStream_t stream);

}  // namespace kestrel::kernels
