#include "engine/ops/common.h"

namespace kestrel::ops {

void check_compatible(const char* op, const Tensor& a, const Tensor& b, bool same_shape) {
  KESTREL_CHECK(a.defined() && b.defined(), op, ": undefined input");
  KESTREL_CHECK(a.device() == b.device(), op, ": inputs on different devices, ", a.describe(),
                " and ", b.describe(), "; move them with .to(device)");
  KESTREL_CHECK(a.dtype() == b.dtype(), op, ": inputs of different dtypes, ", a.describe(), " and ",
                b.describe(), "; cast with .to(dtype)");
  KESTREL_CHECK(!same_shape || a.shape() == b.shape(), op, ": shapes differ, ", a.describe(),
                " and ", b.describe());
}

bool kernel_float_dtype(Device d, DType t) {
  return t == DType::F32 || (d.is_cpu() ? t == DType::F64 : t == DType::F16 || t == DType::BF16);
}

void check_kernel_dtype(const char* op, const Tensor& t) {
  KESTREL_CHECK(t.defined(), op, ": undefined input");
  KESTREL_CHECK(kernel_float_dtype(t.device(), t.dtype()), op, " on ",
                t.device().is_cpu() ? "the CPU supports float32 and float64"
                                    : "CUDA supports float32, float16 and bfloat16",
                ", got ", t.describe(), "; cast with .to(DType::F32) first");
}

}  // namespace kestrel::ops
