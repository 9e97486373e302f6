#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/optim.h"

namespace kestrel::kernels {

void TensorList::add(std::initializer_list<void*> buffers, int64_t n) {
  KESTREL_CHECK(static_cast<int>(buffers.size()) == depth, "TensorList::add: this list holds ",
                depth, " buffers per tensor, got ", buffers.size());
  KESTREL_CHECK(n >= 0, "TensorList::add: negative element count ", n);
  std::array<void*, kMaxListDepth> p{};
  int i = 0;
  for (void* b : buffers) p[i++] = b;
  ptrs.push_back(p);
  numel.push_back(n);
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

AdamCoef<double> adam_coef(const AdamHyper& h) {
  KESTREL_CHECK(h.step >= 1, "Adam: the step count starts at 1, got ", h.step);
  // As PyTorch computes them in Python floats.
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  return {1.0 - h.beta1, h.beta2,       1.0 - h.beta2,           h.eps,      h.weight_decay,
          h.lr / bc1,    std::sqrt(bc2), 1.0 - h.lr * h.weight_decay, h.decoupled};
}

void sgd_step_cpu(DType t, const TensorList& list, const SgdHyper& h, const float* skip) {
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "SGD step", {
    const SgdCoef<T> c = sgd_coef<T>(h);
    for (size_t k = 0; k < list.size(); ++k) {
      T* p = static_cast<T*>(list.ptrs[k][0]);
      const T* g = static_cast<const T*>(list.ptrs[k][1]);
      T* buf = static_cast<T*>(list.ptrs[k][2]);
      for (int64_t i = 0; i < list.numel[k]; ++i) sgd_update(p[i], buf[i], g[i], c);
    }
  });
}

void adam_step_cpu(DType t, const TensorList& list, const AdamHyper& h, const float* skip) {
  const AdamCoef<double> cd = adam_coef(h);
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "Adam step", {
    const AdamCoef<T> c = cast_coef<T>(cd);
    for (size_t k = 0; k < list.size(); ++k) {
      T* p = static_cast<T*>(list.ptrs[k][0]);
      const T* g = static_cast<const T*>(list.ptrs[k][1]);
      T* m = static_cast<T*>(list.ptrs[k][2]);
      T* v = static_cast<T*>(list.ptrs[k][3]);
      for (int64_t i = 0; i < list.numel[k]; ++i) adam_update(p[i], m[i], v[i], g[i], c);
    }
  });
}

double global_norm_cpu(DType t, const TensorList& list) {
  double sum = 0;
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

void ema_update_cpu(DType t, const TensorList& list, double decay, const float* skip) {
  if (step_skipped(skip)) return;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "EMA update", {
    const T d = static_cast<T>(decay), omd = static_cast<T>(1.0 - decay);
    for (size_t k = 0; k < list.size(); ++k) {
      T* e = static_cast<T*>(list.ptrs[k][0]);
      const T* m = static_cast<const T*>(list.ptrs[k][1]);
      for (int64_t i = 0; i < list.numel[k]; ++i) e[i] = ema_value(e[i], m[i], d, omd);
    }
  });
}

}  // namespace kestrel::kernels
