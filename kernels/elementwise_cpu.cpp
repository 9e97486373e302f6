#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace kestrel::kernels {

void unary_forward_cpu(Unary op, DType t, const void* x_, void* y_, int64_t n) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "activation", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    if (op == Unary::Silu)
      for (int64_t i = 0; i < n; ++i) y[i] = silu_fn(x[i]);
    else
      for (int64_t i = 0; i < n; ++i) y[i] = sigmoid_fn(x[i]);
  });
}

void unary_backward_cpu(Unary op, DType t, const void* saved_, const void* dy_, void* dx_,
                        int64_t n) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "activation backward", {
    const T* saved = static_cast<const T*>(saved_);
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    if (op == Unary::Silu)
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * silu_grad_fn(saved[i]);
    else
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * sigmoid_grad_fn(saved[i]);
  });
}

void binary_cpu(Binary op, DType t, const void* a_, const void* b_, void* out_, int64_t n,
                double alpha) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "binary op", {
    const T* a = static_cast<const T*>(a_);
    const T* b = static_cast<const T*>(b_);
    T* out = static_cast<T*>(out_);
    const T al = static_cast<T>(alpha);
    for (int64_t i = 0; i < n; ++i) out[i] = al * binary_fn(op, a[i], b[i]);
  });
}

void affine_scalar_cpu(DType t, const void* a_, void* out_, int64_t n, double scale,
                       double shift) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "scalar affine", {
    const T* a = static_cast<const T*>(a_);
    T* out = static_cast<T*>(out_);
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] * T(scale) + T(shift);
  });
}

}  // namespace kestrel::kernels
