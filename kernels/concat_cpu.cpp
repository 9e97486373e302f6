#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/concat.h"
#include "kernels/cpu_simd.h"

namespace kestrel::kernels {

void copy_rows_cpu(size_t elem_size, const void* src_, void* dst_, const RowBlock& b) {
  KESTREL_CHECK(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8,
                "copy_rows_cpu: element size ", elem_size, " is not 1, 2, 4 or 8 bytes");
  if (b.rows == 0 || b.cols == 0) return;
  const auto* src = static_cast<const unsigned char*>(src_);
  auto* dst = static_cast<unsigned char*>(dst_);
  const size_t row_bytes = static_cast<size_t>(b.cols) * elem_size;
  // Rows in parallel, about 128 KiB per chunk (concat is pure memory traffic: two cores move
  // more than one).
  const int64_t grain = std::max<int64_t>(1, int64_t{128 << 10} / static_cast<int64_t>(row_bytes));
  parallel_chunks(b.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      std::memcpy(dst + row_block_dst<int64_t>(r, 0, b.dst_ld) * elem_size,
                  src + row_block_src<int64_t>(r, 0, b.src_ld) * elem_size, row_bytes);
  });
}

}  // namespace kestrel::kernels
