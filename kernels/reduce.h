// Sum reductions (sum, mean, per-channel statistics), CPU reference and CUDA.
//
// Every reduction is brought to one shape: a contiguous input viewed as [outer, reduce, inner],
// out[o, i] = scale * sum_r in[o, r, i]. inner == 1 is a row reduction (reduced dims innermost);
// outer == 1 with inner > 1 reduces leading dims and keeps the trailing ones, e.g. per-channel sums
// of an NHWC activation over N*H*W, read in place without a transposing copy.
//
// Accumulation: the CPU reference accumulates in double (float and double inputs). CUDA
// accumulates in float for every storage type (float, half, bfloat16), in a fixed order that
// depends only on the shape: no atomics, so results are bitwise reproducible run to run. Long
// reductions are split across blocks and finished by a second pass over float partials kept in a
// caller-provided workspace.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

struct ReduceShape {
  int64_t outer = 1;
  int64_t reduce = 1;
  int64_t inner = 1;
};

// out[o * inner + i] = scale * sum_r in[(o * reduce + r) * inner + i]; in and out contiguous, of
// dtype t (float/double on the CPU). scale is 1 for a sum and 1/reduce for a mean; it is applied
// to the accumulator before the one rounding to t.
void sum_cpu(DType t, const void* in, void* out, const ReduceShape& shape, double scale);

// Bytes of device workspace sum_cuda needs for this shape (0 when one pass suffices).
size_t sum_cuda_workspace_bytes(const ReduceShape& shape);
// As sum_cpu, for float, half and bfloat16. workspace: sum_cuda_workspace_bytes(shape) bytes of
// device memory (may be null when that is 0), used only by work on `stream`.
void sum_cuda(DType t, const void* in, void* out, const ReduceShape& shape, double scale,
              void* workspace, cudaStream_t stream);

}  // namespace kestrel::kernels
