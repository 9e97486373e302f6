// The CPU reference of the softmax cross-entropy (kernels/cross_entropy.h): plain loops over rows,
// double accumulation for float and double logits, the per-row math shared with CUDA.
#include "kernels/cross_entropy.h"

#include "base/error.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {
namespace {

void check_shape(const char* what, const CrossEntropyShape& s) {
  KESTREL_CHECK(s.rows >= 0 && s.classes >= 1, what, ": needs rows >= 0 and classes >= 1, got [",
                s.rows, ", ", s.classes, "]");
}

void check_labels(const char* what, const int64_t* labels, const CrossEntropyShape& s) {
  const int64_t bad = first_bad_label(labels, s.rows, s.classes);
  KESTREL_CHECK(bad < 0, what, ": row ", bad, " has label ", bad < 0 ? 0 : labels[bad],
                ", outside [0, ", s.classes, "); labels are class indices below the class count");
}

template <class T>
void forward_typed(const T* x, const int64_t* labels, T* loss, T* lse, const CrossEntropyShape& s,
                   double eps) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* row = x + r * s.classes;
    const CeRowStats<double> st = ce_row_stats<double>(row, s.classes);
    loss[r] = static_cast<T>(
        ce_row_loss<double>(st, static_cast<double>(row[labels[r]]), s.classes, eps));
    lse[r] = static_cast<T>(st.lse);
  }
}

template <class T>
void backward_typed(const T* x, const int64_t* labels, const T* lse, const T* gout, T* dx,
                    const CrossEntropyShape& s, double eps) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const double l = static_cast<double>(lse[r]), g = static_cast<double>(gout[r]);
    for (int64_t c = 0; c < s.classes; ++c) {
      const int64_t i = r * s.classes + c;
      dx[i] = static_cast<T>(ce_grad<double>(static_cast<double>(x[i]), l,
                                             ce_target<double>(c, labels[r], s.classes, eps), g));
    }
  }
}

}  // namespace

int64_t first_bad_label(const int64_t* labels, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r)
    if (!ce_label_ok(labels[r], classes)) return r;
  return -1;
}

void cross_entropy_forward_cpu(DType t, const void* logits, const int64_t* labels, void* loss,
                               void* lse, const CrossEntropyShape& s, double label_smoothing) {
  check_shape("cross_entropy", s);
  check_labels("cross_entropy", labels, s);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "cross_entropy", {
    forward_typed(static_cast<const T*>(logits), labels, static_cast<T*>(loss),
                  static_cast<T*>(lse), s, label_smoothing);
  });
}

void cross_entropy_backward_cpu(DType t, const void* logits, const int64_t* labels, const void* lse,
                                const void* gout, void* dlogits, const CrossEntropyShape& s,
                                double label_smoothing) {
  check_shape("cross_entropy backward", s);
  check_labels("cross_entropy backward", labels, s);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "cross_entropy backward", {
    backward_typed(static_cast<const T*>(logits), labels, static_cast<const T*>(lse),
                   static_cast<const T*>(gout), static_cast<T*>(dlogits), s, label_smoothing);
  });
}

}  // namespace kestrel::kernels
