// Deterministic sums on CUDA. Three kernel shapes, chosen from the ReduceShape alone:
//   short rows (inner == 1, reduce < kShortRow): one thread per row;
//   rows (inner == 1, rows short enough or numerous enough to fill the GPU one warp each): one
//     warp per row, a shuffle tree finishes it;
//   columns (everything else): a block covers `cols` adjacent columns and `lanes` = 256 / cols
//     rows side by side, so consecutive threads read consecutive addresses, and a shared-memory
//     tree finishes the block. With inner == 1 (long rows) that is a whole block per row chunk.
// When the work per output is long, the columns kernel cuts the reduced axis into `splits` chunks
// handled by separate blocks that write float partials to the workspace; a second launch with one
// chunk sums the partials (whole blocks again, so the second pass stays short). Every order of
// addition is fixed by the shape.
#include <algorithm>
#include <climits>

#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/reduce.h"

namespace kestrel::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kBlock = cuda::kThreads;  // 256
constexpr int kWarpsPerBlock = kBlock / kWarp;
// Rows shorter than this are summed by one thread each: a warp would leave most lanes idle.
constexpr int64_t kShortRow = 16;
// Rows up to this long take a warp each; longer ones a block per chunk, unless there are enough
// rows to fill the GPU with warps anyway.
constexpr int64_t kMaxWarpRow = 1024;
// About one wave of blocks on an H100 (132 SMs x 8 resident blocks of 256 threads); splitting
// further only lengthens the second pass.
constexpr int64_t kTargetBlocks = 1024;
// A chunk keeps at least this many elements per block, so that a split is worth its partial write.
constexpr int64_t kMinBlockChunk = 4096;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Split {
  int64_t splits = 1;  // chunks the reduced axis is cut into
  int64_t chunk = 1;   // reduced elements per chunk
};

// Cuts `reduce` into chunks of at least `min_chunk` until `independent` x splits blocks reach
// kTargetBlocks.
Split split_reduce(int64_t reduce, int64_t independent, int64_t min_chunk) {
  Split s;
  s.splits = std::clamp<int64_t>(
      std::min(ceil_div(reduce, min_chunk), ceil_div(kTargetBlocks, independent)), 1,
      kTargetBlocks);
  s.chunk = std::max<int64_t>(ceil_div(reduce, s.splits), 1);
  s.splits = std::max<int64_t>(ceil_div(reduce, s.chunk), 1);  // no empty chunk at the end
  return s;
}

struct Plan {
  enum class Kind { ShortRows, Rows, Columns } kind = Kind::ShortRows;
  // Columns only:
  Split split;
  int cols = 1;  // adjacent columns per block; kBlock / cols rows run side by side
  int64_t col_blocks = 1;
};

Plan make_plan(const ReduceShape& s) {
  Plan p;
  if (s.inner == 1 && s.reduce < kShortRow) return p;
  if (s.inner == 1 && (s.reduce <= kMaxWarpRow || s.outer >= kTargetBlocks * kWarpsPerBlock)) {
    p.kind = Plan::Kind::Rows;
    return p;
  }
  p.kind = Plan::Kind::Columns;
  // A warp's worth of columns when there are that many; wider blocks (fewer row lanes) when the
  // reduced axis is too short to keep the lanes busy.
  p.cols = static_cast<int>(std::min<int64_t>(s.inner, kWarp));
  while (p.cols * 2 <= s.inner && p.cols * 2 <= kBlock && kBlock / (p.cols * 2) >= s.reduce)
    p.cols *= 2;
  p.col_blocks = ceil_div(s.inner, p.cols);
  p.split = split_reduce(s.reduce, s.outer * p.col_blocks, ceil_div(kMinBlockChunk, p.cols));
  return p;
}

// Sum of v over the 32 lanes, valid in lane 0; the shuffle pattern is fixed, so is the order.
__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Warp w sums row w.
template <class T>
__global__ void rows_kernel(const T* in, T* out, int64_t rows, int64_t reduce, float scale) {
  const int64_t row = (blockIdx.x * int64_t(kBlock) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // uniform across the warp: the shuffle sees all lanes
  const T* p = in + row * reduce;
  float acc = 0.f;
#pragma unroll 4
  for (int64_t r = lane; r < reduce; r += kWarp) acc += static_cast<float>(to_acc(p[r]));
  acc = warp_sum(acc);
  if (lane == 0) out[row] = from_acc<T>(acc * scale);
}

// Block (o, column block) x chunk: thread t takes column t % cols and rows t / cols + k * lanes of
// the chunk; the lanes' partial sums are folded by a tree in shared memory. Writes
// out[(o * gridDim.y + chunk index) * inner + column].
template <class In, class Out>
__global__ void columns_kernel(const In* in, Out* out, ReduceShape s, int cols, int64_t col_blocks,
                               int64_t chunk, float scale) {
  __shared__ float partial[kBlock];
  const int lanes = kBlock / cols;
  const int tx = threadIdx.x % cols, ty = threadIdx.x / cols;
  const int64_t o = blockIdx.x / col_blocks;
  const int64_t col = (blockIdx.x % col_blocks) * cols + tx;
  const int64_t begin = blockIdx.y * chunk;
  const int64_t end = std::min(begin + chunk, s.reduce);
  float acc = 0.f;
  if (ty < lanes && col < s.inner) {
    const In* p = in + o * s.reduce * s.inner + col;
#pragma unroll 4
    for (int64_t r = begin + ty; r < end; r += lanes)
      acc += static_cast<float>(to_acc(p[r * s.inner]));
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  int top = 1;
  while (top < lanes) top *= 2;
  for (int step = top / 2; step > 0; step /= 2) {
    if (ty < step && ty + step < lanes) partial[threadIdx.x] += partial[threadIdx.x + step * cols];
    __syncthreads();
  }
  if (ty == 0 && col < s.inner)
    out[(o * gridDim.y + blockIdx.y) * s.inner + col] = from_acc<Out>(partial[tx] * scale);
}

template <class T>
void launch_rows(const T* in, T* out, int64_t rows, int64_t reduce, float scale,
                 cudaStream_t stream) {
  const int64_t blocks = ceil_div(rows, kWarpsPerBlock);
  KESTREL_CHECK(blocks <= INT_MAX, "sum_cuda: ", rows, " rows is more than one launch can cover");
  rows_kernel<T>
      <<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(in, out, rows, reduce, scale);
  KESTREL_CUDA_CHECK_LAUNCH();
}

template <class In, class Out>
void launch_columns(const In* in, Out* out, const ReduceShape& s, const Plan& p, Split split,
                    float scale, cudaStream_t stream) {
  const int64_t blocks = s.outer * p.col_blocks;
  KESTREL_CHECK(blocks <= INT_MAX, "sum_cuda: [", s.outer, ", ", s.reduce, ", ", s.inner,
                "] needs more blocks than one launch can cover");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(split.splits));
  columns_kernel<In, Out>
      <<<grid, kBlock, 0, stream>>>(in, out, s, p.cols, p.col_blocks, split.chunk, scale);
  KESTREL_CUDA_CHECK_LAUNCH();
}

template <class T>
void sum_typed(const T* in, T* out, const ReduceShape& s, float scale, float* partials,
               cudaStream_t stream) {
  const Plan p = make_plan(s);
  switch (p.kind) {
    case Plan::Kind::ShortRows: {
      const int64_t reduce = s.reduce;
      cuda::launch_map(s.outer, stream, [=] __device__(int64_t row) {
        float acc = 0.f;
        for (int64_t r = 0; r < reduce; ++r)
          acc += static_cast<float>(to_acc(in[row * reduce + r]));
        out[row] = from_acc<T>(acc * scale);
      });
      return;
    }
    case Plan::Kind::Rows:
      return launch_rows(in, out, s.outer, s.reduce, scale, stream);
    case Plan::Kind::Columns: {
      if (p.split.splits == 1) return launch_columns(in, out, s, p, p.split, scale, stream);
      launch_columns(in, partials, s, p, p.split, 1.f, stream);
      // The partials are [outer, splits, inner]: the same columns, one chunk over the splits.
      const ReduceShape second{s.outer, p.split.splits, s.inner};
      const Split one{1, p.split.splits};
      return launch_columns(static_cast<const float*>(partials), out, second, p, one, scale,
                            stream);
    }
  }
}

}  // namespace

size_t sum_cuda_workspace_bytes(const ReduceShape& s) {
  if (s.outer * s.inner == 0) return 0;
  const Plan p = make_plan(s);
  if (p.split.splits == 1) return 0;
  return static_cast<size_t>(s.outer * p.split.splits * s.inner) * sizeof(float);
}

void sum_cuda(DType t, const void* in, void* out, const ReduceShape& s, double scale,
              void* workspace, cudaStream_t stream) {
  KESTREL_CHECK(s.outer >= 0 && s.reduce >= 0 && s.inner >= 0, "sum_cuda: negative extent in [",
                s.outer, ", ", s.reduce, ", ", s.inner, "]");
  if (s.outer * s.inner == 0) return;
  KESTREL_CHECK(workspace || sum_cuda_workspace_bytes(s) == 0, "sum_cuda: [", s.outer, ", ",
                s.reduce, ", ", s.inner, "] needs ", sum_cuda_workspace_bytes(s),
                " bytes of workspace, got none");
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "sum", {
    sum_typed(static_cast<const T*>(in), static_cast<T*>(out), s, static_cast<float>(scale),
              static_cast<float*>(workspace), stream);
  });
}

}  // namespace kestrel::kernels
