// Element types shared by every layer, and the half-precision types (CUDA's, usable on the host).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define KESTREL_HD __host__ __device__
#else
#define KESTREL_HD
#endif

namespace kestrel {

using f16 = __half;
using bf16 = __nv_bfloat16;

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool is_floating(DType t);

// Reads element i of a buffer of type t as double / writes a double into it (host only; used by
// fills, casts on the CPU, tests and printing).
double load_as_double(const void* data, DType t, int64_t i);
void store_from_double(void* data, DType t, int64_t i, double v);

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };

// Arithmetic type for a storage type: half types compute in float.
template <class T> struct AccType { using type = T; };
template <> struct AccType<f16> { using type = float; };
template <> struct AccType<bf16> { using type = float; };
template <class T> using acc_t = typename AccType<T>::type;

template <class T> KESTREL_HD inline acc_t<T> to_acc(T v) { return static_cast<acc_t<T>>(v); }
template <class T> KESTREL_HD inline T from_acc(acc_t<T> v) { return static_cast<T>(v); }
template <> KESTREL_HD inline float to_acc<f16>(f16 v) { return __half2float(v); }
template <> KESTREL_HD inline f16 from_acc<f16>(float v) { return __float2half_rn(v); }
template <> KESTREL_HD inline float to_acc<bf16>(bf16 v) { return __bfloat162float(v); }
template <> KESTREL_HD inline bf16 from_acc<bf16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace kestrel
