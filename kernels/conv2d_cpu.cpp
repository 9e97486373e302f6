// CPU reference convolution: im2col + BLAS GEMM, one image at a time so the scratch memory stays
// at one image's patch matrix. A 1x1, stride-1, unpadded convolution needs no im2col at all: the
// NHWC image already is its patch matrix.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "kernels/conv2d.h"
#include "kernels/bf16_operands.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {
namespace {

// c = op(a) . op(b) + beta * c, row-major; ta / tb transpose a / b.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

bool is_pointwise(const Conv2dShape& s) {
  return s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
         s.pad_w == 0;
}

// BLAS takes int dimensions.
void check_blas_limits(const Conv2dShape& s) {
  const int64_t m = s.out_h() * s.out_w();
  KESTREL_CHECK(m < INT_MAX && s.patch() < INT_MAX && s.o < INT_MAX,
                "conv2d on the CPU: one image's GEMM (", m, " x ", s.patch(), " x ", s.o,
                ") exceeds BLAS's int dimensions; use a smaller image");
}

// Calls f(row, ih, iw) for every tap of the patch matrix of one image, where `row` is the offset
// of the tap's C values in the (OH*OW) x (KH*KW*C) matrix and (ih, iw) the input pixel it reads
// (possibly in the padding).
template <class F>
void for_each_tap(const Conv2dShape& s, F f) {
  const int64_t out_w = s.out_w();
  int64_t row = 0;
  for (int64_t oh = 0; oh < s.out_h(); ++oh)
    for (int64_t ow = 0; ow < out_w; ++ow)
      for (int64_t ki = 0; ki < s.kh; ++ki)
        for (int64_t kj = 0; kj < s.kw; ++kj, row += s.c)
          f(row, s.in_row(oh, ki), s.in_col(ow, kj));
}

bool inside(const Conv2dShape& s, int64_t ih, int64_t iw) {
  return ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
}

template <class T>
void im2col(const Conv2dShape& s, const T* x, T* col) {
  for_each_tap(s, [&](int64_t row, int64_t ih, int64_t iw) {
    if (inside(s, ih, iw))
      std::memcpy(col + row, x + (ih * s.w + iw) * s.c, s.c * sizeof(T));
    else
      std::fill(col + row, col + row + s.c, T(0));
  });
}

// The adjoint of im2col: every patch value is added back onto the pixel it was read from.
template <class T>
void col2im(const Conv2dShape& s, const T* col, T* x) {
  std::fill(x, x + s.h * s.w * s.c, T(0));
  for_each_tap(s, [&](int64_t row, int64_t ih, int64_t iw) {
    if (!inside(s, ih, iw)) return;
    T* dst = x + (ih * s.w + iw) * s.c;
    for (int64_t c = 0; c < s.c; ++c) dst[c] += col[row + c];
  });
}

// The patch matrix of image `xn`: the image itself for pointwise convolutions, else im2col into
// `scratch` (sized by patch_scratch).
template <class T>
const T* patches(const Conv2dShape& s, const T* xn, std::vector<T>& scratch) {
  if (is_pointwise(s)) return xn;
  im2col(s, xn, scratch.data());
  return scratch.data();
}

template <class T>
std::vector<T> patch_scratch(const Conv2dShape& s) {
  return std::vector<T>(is_pointwise(s) ? 0 : s.out_h() * s.out_w() * s.patch());
}

template <class T>
void forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  const int64_t m = s.out_h() * s.out_w(), k = s.patch(), image = s.h * s.w * s.c;
  std::vector<T> col = patch_scratch<T>(s);
  for (int64_t n = 0; n < s.n; ++n) {
    T* yn = y + n * m * s.o;
    if (bias)
      for (int64_t r = 0; r < m; ++r) std::copy(bias, bias + s.o, yn + r * s.o);
    // y_n (M x O) = col (M x K) . W^T, W viewed as O x K.
    gemm(false, true, m, s.o, k, patches(s, x + n * image, col), k, w, k, bias ? T(1) : T(0), yn,
         s.o);
  }
}

template <class T>
void backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  const int64_t m = s.out_h() * s.out_w(), k = s.patch(), image = s.h * s.w * s.c;
  std::vector<T> dcol = patch_scratch<T>(s);
  for (int64_t n = 0; n < s.n; ++n) {
    T* dxn = dx + n * image;
    // dcol (M x K) = dy_n (M x O) . W (O x K); for pointwise convolutions that is dx_n itself.
    T* target = is_pointwise(s) ? dxn : dcol.data();
    gemm(false, false, m, k, s.o, dy + n * m * s.o, s.o, w, k, T(0), target, k);
    if (!is_pointwise(s)) col2im(s, dcol.data(), dxn);
  }
}

template <class T>
void backward_filter(const Conv2dShape& s, const T* x, const T* dy, T* dw) {
  const int64_t m = s.out_h() * s.out_w(), k = s.patch(), image = s.h * s.w * s.c;
  std::vector<T> col = patch_scratch<T>(s);
  if (s.n == 0) std::fill(dw, dw + s.o * k, T(0));
  for (int64_t n = 0; n < s.n; ++n) {
    // dW (O x K) += dy_n^T (O x M) . col (M x K); the first image overwrites.
    gemm(true, false, s.o, k, m, dy + n * m * s.o, s.o, patches(s, x + n * image, col), k,
         n == 0 ? T(0) : T(1), dw, k);
  }
}

}  // namespace

void conv2d_forward_cpu(DType t, const Conv2dShape& s, const void* x, const void* w,
                        const void* bias, void* y) {
  check_blas_limits(s);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "conv2d", {
    forward(s, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
            static_cast<T*>(y));
  });
}

void conv2d_backward_data_cpu(DType t, const Conv2dShape& s, const void* dy, const void* w,
                              void* dx) {
  check_blas_limits(s);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "conv2d backward", {
    backward_data(s, static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx));
  });
}

void conv2d_backward_filter_cpu(DType t, const Conv2dShape& s, const void* x, const void* dy,
                                void* dw) {
  check_blas_limits(s);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "conv2d backward", {
    backward_filter(s, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dw));
  });
}

void conv2d_backward_bias_cpu(DType t, int64_t rows, int64_t channels, const void* dy_,
                              void* db_) {
  if (t == DType::BF16) {  // bfloat16 activations: the float32 bias's gradient, summed in double
    const auto* dy = static_cast<const uint16_t*>(dy_);
    std::vector<double> acc(channels, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < channels; ++c) acc[c] += bf16_to_float(dy[r * channels + c]);
    for (int64_t c = 0; c < channels; ++c) static_cast<float*>(db_)[c] = static_cast<float>(acc[c]);
    return;
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "conv2d bias backward", {
    const T* dy = static_cast<const T*>(dy_);
    T* db = static_cast<T*>(db_);
    std::vector<double> acc(channels, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < channels; ++c) acc[c] += dy[r * channels + c];
    for (int64_t c = 0; c < channels; ++c) db[c] = static_cast<T>(acc[c]);
  });
}

}  // namespace kestrel::kernels
