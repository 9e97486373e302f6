// Turns a runtime DType into a compile-time type: KESTREL_DISPATCH_ALL(t, T, { body using T }).
#pragma once
#include "base/dtype.h"
#include "base/error.h"

#define KESTREL_DISPATCH_CASE(ENUM, TYPE, T, ...) \
  case ::kestrel::DType::ENUM: {                  \
    using T = TYPE;                               \
    __VA_ARGS__;                                  \
    break;                                        \
  }

#define KESTREL_DISPATCH_ALL(dtype, T, ...)                                        \
  switch (dtype) {                                                                 \
    KESTREL_DISPATCH_CASE(F32, float, T, __VA_ARGS__)                              \
    KESTREL_DISPATCH_CASE(F64, double, T, __VA_ARGS__)                             \
    KESTREL_DISPATCH_CASE(F16, ::kestrel::f16, T, __VA_ARGS__)                     \
    KESTREL_DISPATCH_CASE(BF16, ::kestrel::bf16, T, __VA_ARGS__)                   \
    KESTREL_DISPATCH_CASE(I32, int32_t, T, __VA_ARGS__)                            \
    KESTREL_DISPATCH_CASE(I64, int64_t, T, __VA_ARGS__)                            \
    KESTREL_DISPATCH_CASE(U8, uint8_t, T, __VA_ARGS__)                             \
  }

// CPU reference kernels compute in float or double.
#define KESTREL_DISPATCH_CPU_FLOAT(dtype, T, what, ...)                                         \
  switch (dtype) {                                                                              \
    KESTREL_DISPATCH_CASE(F32, float, T, __VA_ARGS__)                                           \
    KESTREL_DISPATCH_CASE(F64, double, T, __VA_ARGS__)                                          \
    default:                                                                                    \
      KESTREL_FAIL(what, " on the CPU supports float32 and float64, got ",                      \
                   ::kestrel::dtype_name(dtype), "; cast with .to(DType::F32) first");          \
  }

// CUDA kernels store float, half or bfloat16 and compute in float.
#define KESTREL_DISPATCH_CUDA_FLOAT(dtype, T, what, ...)                                        \
  switch (dtype) {                                                                              \
    KESTREL_DISPATCH_CASE(F32, float, T, __VA_ARGS__)                                           \
    KESTREL_DISPATCH_CASE(F16, ::kestrel::f16, T, __VA_ARGS__)                                  \
    KESTREL_DISPATCH_CASE(BF16, ::kestrel::bf16, T, __VA_ARGS__)                                \
    default:                                                                                    \
      KESTREL_FAIL(what, " on CUDA supports float32, float16 and bfloat16, got ",               \
                   ::kestrel::dtype_name(dtype));                                               \
  }
