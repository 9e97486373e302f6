// The CPU reference of the multi-tensor kernels (plain loops, float and double) and the launch
// planning that the CUDA kernels use. The per-step coefficients come from the same KESTREL_HD
// functions the CUDA kernels call (kernels/optim.h).
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"
#include "kernels/optim.h"

namespace kestrel::kernels {

void TensorList::add(std::initializer_list<void*> buffers, int64_t n, int64_t* count) {
  KESTREL_CHECK(static_cast<int>(buffers.size()) == depth, "TensorList::add: this list holds ",
                depth, " buffers per tensor, got ", buffers.size());
  KESTREL_CHECK(n >= 0, "TensorList::add: negative element count ", n);
  std::array<void*, kMaxListDepth> p{};
  int i = 0;
  for (void* b : buffers) p[i++] = b;
  ptrs.push_back(p);
  numel.push_back(n);
  counts.push_back(count);
}

std::vector<ListLaunch> plan_list_launches(const TensorList& list) {
  std::vector<ListLaunch> launches(1);
  int64_t blocks_before = 0;
  auto close = [&] {
    blocks_before += static_cast<int64_t>(launches.back().block_tensor.size());
    launches.emplace_back().first_block = blocks_before;
  };
  for (size_t k = 0; k < list.size(); ++k) {
    const int64_t chunks = (list.numel[k] + kListChunk - 1) / kListChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      ListLaunch* l = &launches.back();
      if (l->block_tensor.size() == size_t(kMaxListBlocks) ||
          (c == 0 && l->tensors.size() == size_t(kMaxListTensors))) {
        close();
        l = &launches.back();
      }
      if (l->tensors.empty() || l->tensors.back() != static_cast<int>(k))
        l->tensors.push_back(static_cast<int>(k));
      l->block_tensor.push_back(static_cast<int>(l->tensors.size()) - 1);
      l->block_chunk.push_back(static_cast<int32_t>(c));
    }
  }
  if (launches.back().block_tensor.empty()) launches.pop_back();
  return launches;
}

int64_t norm_partial_count(const TensorList& list) {
  int64_t count = 0;
  for (int64_t n : list.numel) count += (n + kListChunk - 1) / kListChunk;
  return count;
}

void sgd_step_cpu(DType t, const TensorList& list, const GroupHyper* hyper, const SgdConfig& cfg,
                  const float* skip) {
  KESTREL_CHECK(list.depth == 3, "SGD step: the list holds (param, grad, buffer), got depth ",
                list.depth);
  KESTREL_CHECK(hyper != nullptr, "SGD step: no hyperparameters given");
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "SGD step", {
    const SgdCoef<T> c = sgd_coef<T>(*hyper, cfg);
    for (size_t k = 0; k < list.size(); ++k) {
      T* p = static_cast<T*>(list.ptrs[k][0]);
      const T* g = static_cast<const T*>(list.ptrs[k][1]);
      T* buf = static_cast<T*>(list.ptrs[k][2]);
      for (int64_t i = 0; i < list.numel[k]; ++i) sgd_update(p[i], buf[i], g[i], c);
    }
  });
}

void adam_step_cpu(DType t, const TensorList& list, const GroupHyper* hyper, const AdamConfig& cfg,
                   const float* skip) {
  KESTREL_CHECK(list.depth == 4, "Adam step: the list holds (param, grad, exp_avg, exp_avg_sq), ",
                "got depth ", list.depth);
  KESTREL_CHECK(hyper != nullptr, "Adam step: no hyperparameters given");
  for (size_t k = 0; k < list.size(); ++k) {
    KESTREL_CHECK(list.counts[k] != nullptr, "Adam step: tensor ", k,
                  " has no step count; pass one to TensorList::add");
    KESTREL_CHECK(*list.counts[k] >= 0, "Adam step: tensor ", k, " has taken ", *list.counts[k],
                  " steps; a step count is never negative (a damaged checkpoint?)");
  }
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "Adam step", {
    for (size_t k = 0; k < list.size(); ++k) {
      const AdamCoef<T> c = cast_coef<T>(adam_coef(*hyper, cfg, *list.counts[k] + 1));
      T* p = static_cast<T*>(list.ptrs[k][0]);
      const T* g = static_cast<const T*>(list.ptrs[k][1]);
      T* m = static_cast<T*>(list.ptrs[k][2]);
      T* v = static_cast<T*>(list.ptrs[k][3]);
      for (int64_t i = 0; i < list.numel[k]; ++i) adam_update(p[i], m[i], v[i], g[i], c);
    }
  });
  for (size_t k = 0; k < list.size(); ++k) ++*list.counts[k];
}

void rmsprop_step_cpu(DType t, const TensorList& list, const GroupHyper* hyper,
                      const RmspropConfig& cfg, const float* skip) {
  KESTREL_CHECK(list.depth == 4, "RMSProp step: the list holds (param, grad, square_avg, ",
                "momentum_buffer), got depth ", list.depth);
  KESTREL_CHECK(hyper != nullptr, "RMSProp step: no hyperparameters given");
  for (size_t k = 0; k < list.size(); ++k) {
    KESTREL_CHECK(list.counts[k] != nullptr, "RMSProp step: tensor ", k,
                  " has no step count; pass one to TensorList::add");
    KESTREL_CHECK(*list.counts[k] >= 0, "RMSProp step: tensor ", k, " has taken ", *list.counts[k],
                  " steps; a step count is never negative (a damaged checkpoint?)");
  }
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "RMSProp step", {
    const RmspropCoef<T> c = rmsprop_coef<T>(*hyper, cfg);
    for (size_t k = 0; k < list.size(); ++k) {
      T* p = static_cast<T*>(list.ptrs[k][0]);
      const T* g = static_cast<const T*>(list.ptrs[k][1]);
      T* sq = static_cast<T*>(list.ptrs[k][2]);
      T* buf = static_cast<T*>(list.ptrs[k][3]);
      for (int64_t i = 0; i < list.numel[k]; ++i) rmsprop_update(p[i], sq[i], buf[i], g[i], c);
    }
  });
  for (size_t k = 0; k < list.size(); ++k) ++*list.counts[k];
}

namespace {

// sum of x[i]^2 in double over 32 interleaved partial sums (lane j takes i = j mod 32), added in a
// fixed order at the end: independent chains the vectoriser turns into four 8-wide double
// accumulators, where one running sum waits out every add's latency (the gradient norm of a
// yolov5s step: 7 ms of it). Fixed order, so the same bits on every run and thread count.
KESTREL_CPU_CLONES double sum_squares_f32(const float* x, int64_t n) {
  constexpr int kLanes = 32;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  double sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  for (; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

}  // namespace

double global_norm_cpu(DType t, const TensorList& list) {
  double sum = 0;
  if (t == DType::F32) {
    for (size_t k = 0; k < list.size(); ++k) sum += sum_squares_f32(static_cast<const float*>(list.ptrs[k][0]), list.numel[k]);
    return std::sqrt(sum);
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "gradient norm", {
    for (size_t k = 0; k < list.size(); ++k) {
      const T* x = static_cast<const T*>(list.ptrs[k][0]);
      for (int64_t i = 0; i < list.numel[k]; ++i) sum += static_cast<double>(x[i]) * x[i];
    }
  });
  return std::sqrt(sum);
}

bool scale_cpu(DType t, const TensorList& list, double factor) {
  bool found = false;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "gradient scaling", {
    const T f = static_cast<T>(factor);
    for (size_t k = 0; k < list.size(); ++k) {
      T* x = static_cast<T*>(list.ptrs[k][0]);
      for (int64_t i = 0; i < list.numel[k]; ++i) {
        found = found || !std::isfinite(x[i]);
        x[i] = mul_rn(x[i], f);
      }
    }
  });
  return found;
}

void ema_update_cpu(DType t, const TensorList& list, const EmaRamp& ramp, int64_t* updates,
                    const float* skip) {
  KESTREL_CHECK(list.depth == 2, "EMA update: the list holds (ema, model), got depth ",
                list.depth);
  KESTREL_CHECK(updates != nullptr && *updates >= 0,
                "EMA update: needs the update count so far (>= 0), got ",
                updates ? std::to_string(*updates) : std::string("none"));
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "EMA update", {
    const EmaCoef<T> c = ema_coef<T>(ramp, *updates + 1);
    for (size_t k = 0; k < list.size(); ++k) {
      T* e = static_cast<T*>(list.ptrs[k][0]);
      const T* m = static_cast<const T*>(list.ptrs[k][1]);
      for (int64_t i = 0; i < list.numel[k]; ++i)
        e[i] = ema_value(e[i], m[i], c.d, c.one_minus_d);
    }
  });
  ++*updates;
}

void zero_cpu(DType t, const TensorList& list) {
  KESTREL_CHECK(list.depth == 1, "zeroing: expects a list of single tensors, got depth ",
                list.depth);
  const size_t size = dtype_size(t);
  for (size_t k = 0; k < list.size(); ++k)
    if (list.numel[k] > 0) std::memset(list.ptrs[k][0], 0, static_cast<size_t>(list.numel[k]) * size);
}

}  // namespace kestrel::kernels
