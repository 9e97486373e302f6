// Softmax cross-entropy on CUDA (kernels/cross_entropy.h): the forward runs one thread per row
// (a classifier's batch has few rows of at most a few thousand classes: a small share of a step),
// the backward one thread per element. Both compute in float with the per-row math the CPU
// reference uses; every result is one thread's fixed-order loop, so runs repeat bit for bit. A
// row whose label is out of range gets NaN loss, lse and gradients (no exceptions on the device).
#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {
namespace {

void check_shape(const char* what, const CrossEntropyShape& s) {
  KESTREL_CHECK(s.rows >= 0 && s.classes >= 1, what, ": needs rows >= 0 and classes >= 1, got [",
                s.rows, ", ", s.classes, "]");
}

}  // namespace

void cross_entropy_forward_cuda(DType t, const void* logits, const int64_t* labels, float* loss,
                                float* lse, const CrossEntropyShape& s, double label_smoothing,
                                cudaStream_t stream) {
  check_shape("cross_entropy", s);
  const float eps = static_cast<float>(label_smoothing);
  const int64_t classes = s.classes;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "cross_entropy", {
    const T* x = static_cast<const T*>(logits);
    cuda::launch_map(s.rows, stream, [=] __device__(int64_t r) {
      const int64_t label = labels[r];
      if (!ce_label_ok(label, classes)) {
        loss[r] = NAN;
        lse[r] = NAN;
        return;
      }
      const T* row = x + r * classes;
      const CeRowStats<float> st = ce_row_stats<float>(row, classes);
      loss[r] = ce_row_loss<float>(st, to_acc(row[label]), classes, eps);
      lse[r] = st.lse;
    });
  });
}

void cross_entropy_backward_cuda(DType t, const void* logits, const int64_t* labels,
                                 const float* lse, const float* gout, void* dlogits,
                                 const CrossEntropyShape& s, double label_smoothing,
                                 cudaStream_t stream) {
  check_shape("cross_entropy backward", s);
  const float eps = static_cast<float>(label_smoothing);
  const int64_t classes = s.classes;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "cross_entropy backward", {
    const T* x = static_cast<const T*>(logits);
    T* dx = static_cast<T*>(dlogits);
    cuda::launch_map(s.rows * s.classes, stream, [=] __device__(int64_t i) {
      const int64_t r = i / classes, c = i % classes;
      const int64_t label = labels[r];
      const float g = ce_label_ok(label, classes)
                          ? ce_grad<float>(to_acc(x[i]), lse[r],
                                           ce_target<float>(c, label, classes, eps), gout[r])
                          : NAN;
      dx[i] = from_acc<T>(g);
    });
  });
}

}  // namespace kestrel::kernels
