#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {

void unary_forward_cuda(Unary op, DType t, const void* x_, void* y_, int64_t n, cudaStream_t s) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "activation", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    if (op == Unary::Silu)
      cuda::launch_map(n, s, [=] __device__(int64_t i) {
        y[i] = from_acc<T>(silu_fn(to_acc(x[i])));
      });
    else
      cuda::launch_map(n, s, [=] __device__(int64_t i) {
        y[i] = from_acc<T>(sigmoid_fn(to_acc(x[i])));
      });
  });
}

void unary_backward_cuda(Unary op, DType t, const void* saved_, const void* dy_, void* dx_,
                         int64_t n, cudaStream_t s) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "activation backward", {
    const T* saved = static_cast<const T*>(saved_);
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    if (op == Unary::Silu)
      cuda::launch_map(n, s, [=] __device__(int64_t i) {
        dx[i] = from_acc<T>(to_acc(dy[i]) * silu_grad_fn(to_acc(saved[i])));
      });
    else
      cuda::launch_map(n, s, [=] __device__(int64_t i) {
        dx[i] = from_acc<T>(to_acc(dy[i]) * sigmoid_grad_fn(to_acc(saved[i])));
      });
  });
}

void binary_cuda(Binary op, DType t, const void* a_, const void* b_, void* out_, int64_t n,
                 double alpha, cudaStream_t s) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "binary op", {
    const T* a = static_cast<const T*>(a_);
    const T* b = static_cast<const T*>(b_);
    T* out = static_cast<T*>(out_);
    const float al = static_cast<float>(alpha);
    cuda::launch_map(n, s, [=] __device__(int64_t i) {
      out[i] = from_acc<T>(al * binary_fn(op, to_acc(a[i]), to_acc(b[i])));
    });
  });
}

void affine_scalar_cuda(DType t, const void* a_, void* out_, int64_t n, double scale,
                        double shift, cudaStream_t s) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "scalar affine", {
    const T* a = static_cast<const T*>(a_);
    T* out = static_cast<T*>(out_);
    const float sc = static_cast<float>(scale), sh = static_cast<float>(shift);
    cuda::launch_map(n, s, [=] __device__(int64_t i) {
      out[i] = from_acc<T>(to_acc(a[i]) * sc + sh);
    });
  });
}

}  // namespace kestrel::kernels
