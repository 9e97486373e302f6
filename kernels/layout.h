// Layout conversions between NCHW and NHWC, and the conversion of u8 image batches into network
// input.
//
// Per image, NCHW is a [C, H*W] matrix and NHWC is its transpose [H*W, C], so both directions are
// one batched transpose: src [batch, rows, cols] -> dst [batch, cols, rows]. The CUDA version
// stages 32x32 tiles in shared memory (rows padded to an odd pitch: reading a tile column hits 32
// different banks), so both its reads and its writes are coalesced. A dimension under 32 (C = 3 for
// images) would leave most of a 32x32 tile empty, so the tile then spans that whole dimension and
// grows along the other one: its source and destination are then contiguous runs.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/dtype.h"

namespace kestrel::kernels {

struct TransposeShape {
  int64_t batch = 0, rows = 0, cols = 0;
};

// Offsets of element (b, r, c) of the source in the source and in the transposed destination.
template <class I>
KESTREL_HD inline I transpose_src(I b, I r, I c, I rows, I cols) {
  return (b * rows + r) * cols + c;
}
template <class I>
KESTREL_HD inline I transpose_dst(I b, I r, I c, I rows, I cols) {
  return (b * cols + c) * rows + r;
}

// Both versions move the matrix tile by tile through a buffer of kTileCapacity elements (shared
// memory on CUDA; on the CPU the blocking keeps both sides in cache), with the same tiling.
constexpr int kTileCapacity = 32 * 33;

struct TransposeTiling {
  int rows = 0, cols = 0, pitch = 0;  // tile size; buffer row pitch
  int64_t row_tiles = 0, col_tiles = 0;
  int64_t count(const TransposeShape& s) const { return s.batch * row_tiles * col_tiles; }
};

// 32x32 tiles when both dimensions allow; otherwise a tile spans the short dimension entirely and
// takes as much of the long one as fits. The odd pitch puts the 32 buffer rows that a warp reads
// down a column into 32 different banks (4-byte elements; 8-byte ones split into two
// conflict-free half-warps).
inline TransposeTiling transpose_tiling(const TransposeShape& s) {
  TransposeTiling t;
  if (s.rows >= 32 && s.cols >= 32) {
    t.rows = t.cols = 32;
  } else if (s.cols < 32) {
    t.cols = static_cast<int>(s.cols);
    const int64_t fit = kTileCapacity / (t.cols | 1);
    t.rows = static_cast<int>(s.rows < fit ? s.rows : fit);
  } else {
    t.rows = static_cast<int>(s.rows);
    const int64_t fit = kTileCapacity / t.rows - 1;
    t.cols = static_cast<int>(s.cols < fit ? s.cols : fit);
  }
  t.pitch = t.cols | 1;
  t.row_tiles = (s.rows + t.rows - 1) / t.rows;
  t.col_tiles = (s.cols + t.cols - 1) / t.cols;
  return t;
}

// Where tile `id` sits (image b, first row and column) and how much of it is inside the matrix.
struct TileSpan {
  int64_t b, r0, c0;
  int rows, cols;
};
KESTREL_HD inline TileSpan tile_span(const TransposeShape& s, const TransposeTiling& t,
                                     int64_t id) {
  const int64_t per_image = t.row_tiles * t.col_tiles;
  const int64_t b = id / per_image, within = id - b * per_image;
  const int64_t r0 = (within / t.col_tiles) * t.rows, c0 = (within % t.col_tiles) * t.cols;
  const int64_t rows = s.rows - r0 < t.rows ? s.rows - r0 : t.rows;
  const int64_t cols = s.cols - c0 < t.cols ? s.cols - c0 : t.cols;
  return {b, r0, c0, static_cast<int>(rows), static_cast<int>(cols)};
}

// Element e of a tile's loading order walks source rows (consecutive e, consecutive addresses);
// element e of its storing order walks destination rows, i.e. tile columns. Both cover
// [0, span.rows * span.cols). Buffer slot of tile element (r, c): r * pitch + c.
KESTREL_HD inline void tile_load_element(const TileSpan& span, int e, int& r, int& c) {
  r = e / span.cols;
  c = e - r * span.cols;
}
KESTREL_HD inline void tile_store_element(const TileSpan& span, int e, int& r, int& c) {
  c = e / span.rows;
  r = e - c * span.rows;
}

// Pure data movement, so any element size (1, 2, 4 or 8 bytes): float, half and u8 images alike.
void transpose_batched_cpu(size_t elem_size, const void* src, void* dst, const TransposeShape& s);
void transpose_batched_cuda(size_t elem_size, const void* src, void* dst, const TransposeShape& s,
                            cudaStream_t stream);

// Network input value of image byte v: for float, half and bfloat16 the float32 nearest to
// v * scale, then converted to T, so a half-precision input equals the float32 input cast down (as
// a float32 pipeline under autocast would see it); double keeps the product unrounded. The product
// is formed in double: with scale = 1/255 the float32 result is exactly the correctly rounded
// v / 255 of the reference's `img.float() / 255`.
template <class T>
KESTREL_HD inline T scaled_pixel(uint8_t v, double scale) {
  const double x = static_cast<double>(v) * scale;
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return from_acc<T>(static_cast<float>(x));
}

// dst[i] = scaled_pixel<T>(src[i], scale) for i in [0, n). CPU: T float or double; CUDA: float,
// half or bfloat16.
void images_to_input_cpu(const uint8_t* src, DType t, void* dst, int64_t n, double scale);
void images_to_input_cuda(const uint8_t* src, DType t, void* dst, int64_t n, double scale,
                          cudaStream_t stream);

}  // namespace kestrel::kernels
