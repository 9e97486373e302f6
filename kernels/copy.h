// Strided copy (the engine's contiguous(), slice assignment, permutes) and fill.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

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
