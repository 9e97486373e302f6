#include "base/dtype.h"

#include "base/error.h"

namespace kestrel {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  KESTREL_FAIL("unknown dtype ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "unknown";
}

bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

double load_as_double(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::F64: return static_cast<const double*>(data)[i];
    case DType::F16: return __half2float(static_cast<const f16*>(data)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const bf16*>(data)[i]);
    case DType::I32: return static_cast<const int32_t*>(data)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::U8: return static_cast<const uint8_t*>(data)[i];
  }
  KESTREL_FAIL("unknown dtype ", static_cast<int>(t));
}

void store_from_double(void* data, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DType::F64: static_cast<double*>(data)[i] = v; return;
    case DType::F16: static_cast<f16*>(data)[i] = __double2half(v); return;
    case DType::BF16: static_cast<bf16*>(data)[i] = __double2bfloat16(v); return;
    case DType::I32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); return;
    case DType::I64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); return;
    case DType::U8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v); return;
  }
  KESTREL_FAIL("unknown dtype ", static_cast<int>(t));
}

}  // namespace kestrel
