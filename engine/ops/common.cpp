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

}  // namespace kestrel::ops
