// Multi-tensor CUDA kernels. Each block handles one chunk (kListChunk elements) of one tensor; a
// launch's tensor pointers and its block -> (tensor, chunk) map travel in the kernel arguments
// (ListMeta, under the 4 KiB argument limit).
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/optim.h"

namespace kestrel::kernels {
namespace {

constexpr int kBlock = 512;

struct ListMeta {
  void* ptrs[kMaxListDepth][kMaxListTensors];
  int64_t numel[kMaxListTensors];
  uint8_t block_tensor[kMaxListBlocks];
  int32_t block_chunk[kMaxListBlocks];
};
static_assert(sizeof(ListMeta) + 128 <= 4096, "kernel arguments must stay under 4 KiB");

// launch(meta, blocks, first_block) for every launch of plan_list_launches(list).
template <class Launch>
void for_each_launch(const TensorList& list, Launch launch) {
  for (const ListLaunch& l : plan_list_launches(list)) {
    ListMeta meta{};
    for (size_t j = 0; j < l.tensors.size(); ++j) {
      for (int d = 0; d < list.depth; ++d) meta.ptrs[d][j] = list.ptrs[l.tensors[j]][d];
      meta.numel[j] = list.numel[l.tensors[j]];
    }
    for (size_t b = 0; b < l.block_tensor.size(); ++b) {
      meta.block_tensor[b] = static_cast<uint8_t>(l.block_tensor[b]);
      meta.block_chunk[b] = l.block_chunk[b];
    }
    launch(meta, static_cast<int>(l.block_tensor.size()), l.first_block);
  }
}

// op(meta, tensor, element) for every element of the launch's chunks, unless *skip is set.
template <class Op>
__global__ void list_kernel(ListMeta meta, const float* skip, Op op) {
  if (step_skipped(skip)) return;
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t begin = int64_t(meta.block_chunk[blockIdx.x]) * kListChunk;
  const int64_t end = min(meta.numel[t], begin + kListChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) op(meta, t, i);
}

template <class Op>
void launch_list(const TensorList& list, cudaStream_t s, Op op, const float* skip = nullptr) {
  for_each_launch(list, [&](const ListMeta& meta, int blocks, int64_t) {
    list_kernel<<<blocks, kBlock, 0, s>>>(meta, skip, op);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

template <class T>
__device__ T* at(const ListMeta& meta, int d, int t) {
  return static_cast<T*>(meta.ptrs[d][t]);
}

// Fixed-shape tree over the block's shared values: the same order on every run.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  return shared[0];
}

template <class T>
__global__ void norm_partials_kernel(ListMeta meta, double* partials, int64_t first_block) {
  __shared__ double shared[kBlock];
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t begin = int64_t(meta.block_chunk[blockIdx.x]) * kListChunk;
  const int64_t end = min(meta.numel[t], begin + kListChunk);
  const T* x = static_cast<const T*>(meta.ptrs[0][t]);
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = to_acc(x[i]);
    acc += v * v;
  }
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[first_block + blockIdx.x] = total;
}

__global__ void norm_finish_kernel(const double* partials, int64_t count, float* norm) {
  __shared__ double shared[kBlock];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) *norm = static_cast<float>(sqrt(total));
}

}  // namespace

void sgd_step_cuda(DType t, const TensorList& list, const SgdHyper& h, cudaStream_t s,
                   const float* skip) {
  KESTREL_CHECK(list.depth == 3, "SGD step: the list holds (param, grad, buffer), got depth ",
                list.depth);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "SGD step", {
    const SgdCoef<float> c = sgd_coef<float>(h);
    launch_list(list, s, [=] __device__(const ListMeta& m, int k, int64_t i) {
      T* p = at<T>(m, 0, k);
      T* buf = at<T>(m, 2, k);
      float pv = to_acc(p[i]), bv = to_acc(buf[i]);
      sgd_update(pv, bv, to_acc(at<T>(m, 1, k)[i]), c);
      p[i] = from_acc<T>(pv);
      buf[i] = from_acc<T>(bv);
    }, skip);
  });
}

void adam_step_cuda(DType t, const TensorList& list, const AdamHyper& h, cudaStream_t s,
                    const float* skip) {
  KESTREL_CHECK(list.depth == 4, "Adam step: the list holds (param, grad, exp_avg, exp_avg_sq), ",
                "got depth ", list.depth);
  const AdamCoef<float> c = cast_coef<float>(adam_coef(h));
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "Adam step", {
    launch_list(list, s, [=] __device__(const ListMeta& m, int k, int64_t i) {
      T* p = at<T>(m, 0, k);
      T* ea = at<T>(m, 2, k);
      T* eas = at<T>(m, 3, k);
      float pv = to_acc(p[i]), mv = to_acc(ea[i]), vv = to_acc(eas[i]);
      adam_update(pv, mv, vv, to_acc(at<T>(m, 1, k)[i]), c);
      p[i] = from_acc<T>(pv);
      ea[i] = from_acc<T>(mv);
      eas[i] = from_acc<T>(vv);
    }, skip);
  });
}

void global_norm_cuda(DType t, const TensorList& list, double* workspace, float* norm,
                      cudaStream_t s) {
  KESTREL_CHECK(list.depth == 1, "gradient norm: expects a list of single tensors, got depth ",
                list.depth);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "gradient norm", {
    for_each_launch(list, [&](const ListMeta& meta, int blocks, int64_t first_block) {
      norm_partials_kernel<T><<<blocks, kBlock, 0, s>>>(meta, workspace, first_block);
      KESTREL_CUDA_CHECK_LAUNCH();
    });
  });
  norm_finish_kernel<<<1, kBlock, 0, s>>>(workspace, norm_partial_count(list), norm);
  KESTREL_CUDA_CHECK_LAUNCH();
}

void scale_cuda(DType t, const TensorList& list, double factor, float* found_nonfinite,
                cudaStream_t s) {
  KESTREL_CHECK(list.depth == 1, "gradient scaling: expects single tensors, got depth ",
                list.depth);
  const float f = static_cast<float>(factor);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "gradient scaling", {
    launch_list(list, s, [=] __device__(const ListMeta& m, int k, int64_t i) {
      T* x = at<T>(m, 0, k);
      const float v = to_acc(x[i]);
      if (found_nonfinite && !isfinite(v)) *found_nonfinite = 1.0f;  // every writer writes 1
      x[i] = from_acc<T>(mul_rn(v, f));
    });
  });
}

void clip_scale_cuda(DType t, const TensorList& list, const float* norm, double max_norm,
                     cudaStream_t s) {
  KESTREL_CHECK(list.depth == 1, "gradient clipping: expects single tensors, got depth ",
                list.depth);
  const float mx = static_cast<float>(max_norm);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "gradient clipping", {
    launch_list(list, s, [=] __device__(const ListMeta& m, int k, int64_t i) {
      T* x = at<T>(m, 0, k);
      x[i] = from_acc<T>(mul_rn(to_acc(x[i]), clip_coef(*norm, mx)));
    });
  });
}

void ema_update_cuda(DType t, const TensorList& list, double decay, cudaStream_t s,
                     const float* skip) {
  KESTREL_CHECK(list.depth == 2, "EMA update: the list holds (ema, model), got depth ",
                list.depth);
  const float d = static_cast<float>(decay), omd = static_cast<float>(1.0 - decay);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "EMA update", {
    launch_list(list, s, [=] __device__(const ListMeta& m, int k, int64_t i) {
      T* e = at<T>(m, 0, k);
      e[i] = from_acc<T>(ema_value(to_acc(e[i]), to_acc(at<T>(m, 1, k)[i]), d, omd));
    }, skip);
  });
}

}  // namespace kestrel::kernels
