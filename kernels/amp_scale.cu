// The loss scaler's CUDA kernels. unscale covers a whole gradient list in as few launches as
// kernels/optim.cu's multi-tensor kernels (the same cut and ListMeta: kernels/list_launch.cuh)
// and reads the scale on the device; combine_skip and update_scale are one-thread kernels.
#include "kernels/amp_scale.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#include "kernels/list_launch.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kBlock = 512;

template <class T>
__global__ void unscale_kernel(ListMeta meta, const float* scale, float* found_inf) {
  const float inv = inverse_scale(*scale);
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t begin = int64_t(meta.block_chunk[blockIdx.x]) * kListChunk;
  const int64_t end = min(meta.numel[t], begin + kListChunk);
  T* x = static_cast<T*>(meta.ptrs[0][t]);
  bool found = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = to_acc(x[i]);
    found = found || nonfinite(v);
    x[i] = from_acc<T>(mul_rn(v, inv));
  }
  if (found) *found_inf = 1.0f;  // every writer writes 1
}

__global__ void combine_skip_kernel(const float* skip, const float* found_inf, float* out) {
  *out = combined_skip(skip, *found_inf);
}

__global__ void update_scale_kernel(float* scale, int32_t* tracker, int64_t* skipped,
                                    float* found_inf, ScaleSchedule schedule) {
  update_scale_value(*scale, *tracker, *skipped, *found_inf != 0.0f, schedule);
  *found_inf = 0.0f;
}

}  // namespace

void unscale_cuda(DType t, const TensorList& list, const float* scale, float* found_inf,
                  cudaStream_t s) {
  KESTREL_CHECK(list.depth == 1, "gradient unscaling: expects single tensors, got depth ",
                list.depth);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "gradient unscaling", {
    for_each_launch(list, [&](const ListMeta& meta, int blocks, int64_t) {
      unscale_kernel<T><<<blocks, kBlock, 0, s>>>(meta, scale, found_inf);
      KESTREL_CUDA_CHECK_LAUNCH();
    });
  });
}

void combine_skip_cuda(const float* skip, const float* found_inf, float* out, cudaStream_t s) {
  combine_skip_kernel<<<1, 1, 0, s>>>(skip, found_inf, out);
  KESTREL_CUDA_CHECK_LAUNCH();
}

void update_scale_cuda(float* scale, int32_t* tracker, int64_t* skipped, float* found_inf,
                       const ScaleSchedule& schedule, cudaStream_t s) {
  update_scale_kernel<<<1, 1, 0, s>>>(scale, tracker, skipped, found_inf, schedule);
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::kernels
