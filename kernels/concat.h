// Concatenation and its inverse (the split of the gradient) as row-block copies.
//
// Seen as a matrix, concatenating along dimension d copies each input's [outer, inner_i] matrix
// into columns [offset_i, offset_i + inner_i) of the output's [outer, sum inner] matrix, where
// outer is the product of the sizes before d and inner_i the product of input i's sizes from d
// on. On NHWC channels (YOLOv5's Concat) a row is one pixel's channels. One copy per input keeps
// each launch a plain strided copy with no per-element search for the owning input.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

// rows x cols elements; row r starts at src + r * src_ld and dst + r * dst_ld (in elements).
struct RowBlock {
  int64_t rows = 0, cols = 0, src_ld = 0, dst_ld = 0;
};

// Offsets of element (row, col) of the block in the source and the destination.
template <class I>
KESTREL_HD inline I row_block_src(I row, I col, I src_ld) {
  return row * src_ld + col;
}
template <class I>
KESTREL_HD inline I row_block_dst(I row, I col, I dst_ld) {
  return row * dst_ld + col;
}

// Pure data movement, so any element size (1, 2, 4 or 8 bytes) and every dtype. src and dst must
// not overlap. The CUDA version moves the widest unit (up to 16 bytes) that divides the row
// length, both leading dimensions and both addresses.
void copy_rows_cpu(size_t elem_size, const void* src, void* dst, const RowBlock& block);
void copy_rows_cuda(size_t elem_size, const void* src, void* dst, const RowBlock& block,
                    cudaStream_t stream);

}  // namespace kestrel::kernels
