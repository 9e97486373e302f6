// Multi-tensor CUDA kernels. Each block handles one chunk (kListChunk elements) of one tensor; a
// launch's tensor pointers (and step counts) and its block -> (tensor, chunk) map travel in the
// kernel arguments (kernels/list_launch.cuh). The optimizer and EMA kernels
// read their per-step values (GroupHyper, counts) from device memory: thread 0 of each block
// computes the block's coefficients into shared memory; the counts advance in a separate launch
// once every block has read them. Nothing here allocates or waits, so all of it can be captured
// in a CUDA graph.
#include <algorithm>

#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/list_launch.cuh"
#include "kernels/optim.h"

namespace kestrel::kernels {
namespace {

constexpr int kBlock = 512;

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

// As list_kernel, with per-block coefficients: thread 0 computes prep(meta, tensor) (reading
// device memory: hyperparameters, counts) into shared memory, then every thread runs
// op(meta, tensor, element, coef).
template <class Coef, class Prep, class Op>
__global__ void coef_list_kernel(ListMeta meta, const float* skip, Prep prep, Op op) {
  if (step_skipped(skip)) return;  // the same for every thread of the block
  __shared__ Coef shared_coef;
  const int t = meta.block_tensor[blockIdx.x];
  if (threadIdx.x == 0) shared_coef = prep(meta, t);
  __syncthreads();
  const Coef coef = shared_coef;
  const int64_t begin = int64_t(meta.block_chunk[blockIdx.x]) * kListChunk;
  const int64_t end = min(meta.numel[t], begin + kListChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) op(meta, t, i, coef);
}

template <class Coef, class Prep, class Op>
void launch_coef_list(const TensorList& list, cudaStream_t s, Prep prep, Op op,
                      const float* skip) {
  for_each_launch(list, [&](const ListMeta& meta, int blocks, int64_t) {
    coef_list_kernel<Coef><<<blocks, kBlock, 0, s>>>(meta, skip, prep, op);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

// ++*counts[i] for every count, unless *skip is set; one thread per count.
constexpr int kMaxCountsPerLaunch = 256;
struct CountMeta {
  int64_t* counts[kMaxCountsPerLaunch];
  int n;
};

__global__ void advance_counts_kernel(CountMeta meta, const float* skip) {
  if (step_skipped(skip)) return;
  if (static_cast<int>(threadIdx.x) < meta.n) ++*meta.counts[threadIdx.x];
}

void advance_counts(const std::vector<int64_t*>& counts, cudaStream_t s, const float* skip) {
  for (size_t first = 0; first < counts.size(); first += kMaxCountsPerLaunch) {
    CountMeta meta{};
    meta.n = static_cast<int>(std::min(counts.size() - first, size_t(kMaxCountsPerLaunch)));
    for (int i = 0; i < meta.n; ++i) meta.counts[i] = counts[first + i];
    advance_counts_kernel<<<1, kMaxCountsPerLaunch, 0, s>>>(meta, skip);
    KESTREL_CUDA_CHECK_LAUNCH();
  }
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

// Zero bits of a given width: +0.0 in every floating dtype, 0 in every integer one.
template <class Word>
__global__ void zero_kernel(ListMeta meta) {
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t begin = int64_t(meta.block_chunk[blockIdx.x]) * kListChunk;
  const int64_t end = min(meta.numel[t], begin + kListChunk);
  Word* x = static_cast<Word*>(meta.ptrs[0][t]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = Word(0);
}

template <class Word>
void zero_words(const TensorList& list, cudaStream_t s) {
  for_each_launch(list, [&](const ListMeta& meta, int blocks, int64_t) {
    zero_kernel<Word><<<blocks, kBlock, 0, s>>>(meta);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void sgd_step_cuda(DType t, const TensorList& list, const GroupHyper* hyper, const SgdConfig& cfg,
                   cudaStream_t s, const float* skip) {
  KESTREL_CHECK(list.depth == 3, "SGD step: the list holds (param, grad, buffer), got depth ",
                list.depth);
  KESTREL_CHECK(hyper != nullptr, "SGD step: no hyperparameters given");
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "SGD step", {
    launch_coef_list<SgdCoef<float>>(
        list, s,
        [=] __device__(const ListMeta&, int) { return sgd_coef<float>(*hyper, cfg); },
        [=] __device__(const ListMeta& m, int k, int64_t i, const SgdCoef<float>& c) {
          T* p = at<T>(m, 0, k);
          T* buf = at<T>(m, 2, k);
          float pv = to_acc(p[i]), bv = to_acc(buf[i]);
          sgd_update(pv, bv, to_acc(at<T>(m, 1, k)[i]), c);
          p[i] = from_acc<T>(pv);
          buf[i] = from_acc<T>(bv);
        },
        skip);
  });
}

void adam_step_cuda(DType t, const TensorList& list, const GroupHyper* hyper, const AdamConfig& cfg,
                    cudaStream_t s, const float* skip) {
  KESTREL_CHECK(list.depth == 4, "Adam step: the list holds (param, grad, exp_avg, exp_avg_sq), ",
                "got depth ", list.depth);
  KESTREL_CHECK(hyper != nullptr, "Adam step: no hyperparameters given");
  for (size_t k = 0; k < list.size(); ++k)
    KESTREL_CHECK(list.counts[k] != nullptr, "Adam step: tensor ", k,
                  " has no step count; pass one to TensorList::add");
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "Adam step", {
    launch_coef_list<AdamCoef<float>>(
        list, s,
        [=] __device__(const ListMeta& m, int k) {
          return cast_coef<float>(adam_coef(*hyper, cfg, *m.counts[k] + 1));
        },
        [=] __device__(const ListMeta& m, int k, int64_t i, const AdamCoef<float>& c) {
          T* p = at<T>(m, 0, k);
          T* ea = at<T>(m, 2, k);
          T* eas = at<T>(m, 3, k);
          float pv = to_acc(p[i]), mv = to_acc(ea[i]), vv = to_acc(eas[i]);
          adam_update(pv, mv, vv, to_acc(at<T>(m, 1, k)[i]), c);
          p[i] = from_acc<T>(pv);
          ea[i] = from_acc<T>(mv);
          eas[i] = from_acc<T>(vv);
        },
        skip);
  });
  advance_counts(list.counts, s, skip);
}

void rmsprop_step_cuda(DType t, const TensorList& list, const GroupHyper* hyper,
                       const RmspropConfig& cfg, cudaStream_t s, const float* skip) {
  KESTREL_CHECK(list.depth == 4, "RMSProp step: the list holds (param, grad, square_avg, ",
                "momentum_buffer), got depth ", list.depth);
  KESTREL_CHECK(hyper != nullptr, "RMSProp step: no hyperparameters given");
  for (size_t k = 0; k < list.size(); ++k)
    KESTREL_CHECK(list.counts[k] != nullptr, "RMSProp step: tensor ", k,
                  " has no step count; pass one to TensorList::add");
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "RMSProp step", {
    launch_coef_list<RmspropCoef<float>>(
        list, s,
        [=] __device__(const ListMeta&, int) { return rmsprop_coef<float>(*hyper, cfg); },
        [=] __device__(const ListMeta& m, int k, int64_t i, const RmspropCoef<float>& c) {
          T* p = at<T>(m, 0, k);
          T* sq = at<T>(m, 2, k);
          T* buf = at<T>(m, 3, k);
          float pv = to_acc(p[i]), sv = to_acc(sq[i]), bv = to_acc(buf[i]);
          rmsprop_update(pv, sv, bv, to_acc(at<T>(m, 1, k)[i]), c);
          p[i] = from_acc<T>(pv);
          sq[i] = from_acc<T>(sv);
          buf[i] = from_acc<T>(bv);
        },
        skip);
  });
  advance_counts(list.counts, s, skip);
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

void ema_update_cuda(DType t, const TensorList& list, const EmaRamp& ramp, int64_t* updates,
                     cudaStream_t s, const float* skip) {
  KESTREL_CHECK(list.depth == 2, "EMA update: the list holds (ema, model), got depth ",
                list.depth);
  KESTREL_CHECK(updates != nullptr, "EMA update: no update count given");
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "EMA update", {
    launch_coef_list<EmaCoef<float>>(
        list, s,
        [=] __device__(const ListMeta&, int) { return ema_coef<float>(ramp, *updates + 1); },
        [=] __device__(const ListMeta& m, int k, int64_t i, const EmaCoef<float>& c) {
          T* e = at<T>(m, 0, k);
          e[i] = from_acc<T>(ema_value(to_acc(e[i]), to_acc(at<T>(m, 1, k)[i]), c.d,
                                       c.one_minus_d));
        },
        skip);
  });
  advance_counts({updates}, s, skip);
}

void zero_cuda(DType t, const TensorList& list, cudaStream_t s) {
  KESTREL_CHECK(list.depth == 1, "zeroing: expects a list of single tensors, got depth ",
                list.depth);
  switch (dtype_size(t)) {
    case 1: return zero_words<uint8_t>(list, s);
    case 2: return zero_words<uint16_t>(list, s);
    case 4: return zero_words<uint32_t>(list, s);
    case 8: return zero_words<uint64_t>(list, s);
    default: break;
  }
  KESTREL_FAIL("zeroing: no kernel for ", dtype_size(t), "-byte elements (", dtype_name(t), ")");
}

}  // namespace kestrel::kernels
