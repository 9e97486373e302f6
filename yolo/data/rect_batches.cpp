#include "yolo/data/rect_batches.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "yolo/data/numpy_argsort.h"

namespace kestrel::yolo::data {

RectBatches rect_batches(const std::vector<std::array<int, 2>>& wh, int batch_size, int img_size,
                         int stride, double pad) {
  KESTREL_CHECK(batch_size > 0 && img_size > 0 && stride > 0,
                "rect_batches: batch_size, img_size and stride must be positive");
  const int64_t n = static_cast<int64_t>(wh.size());
  std::vector<double> ar(n);
  for (int64_t i = 0; i < n; ++i) {
    KESTREL_CHECK(wh[i][0] > 0 && wh[i][1] > 0, "rect_batches: image ", i, " has size ",
                  wh[i][0], "x", wh[i][1]);
    ar[i] = static_cast<double>(wh[i][1]) / wh[i][0];
  }
  RectBatches out;
  out.order = numpy_argsort(ar);
  const int64_t nb = (n + batch_size - 1) / batch_size;
  for (int64_t b = 0; b < nb; ++b) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = b * batch_size; i < std::min(n, (b + 1) * batch_size); ++i)
      lo = std::min(lo, ar[out.order[i]]), hi = std::max(hi, ar[out.order[i]]);
    double sh = 1, sw = 1;  // shape as fractions of img_size (height, width)
    if (hi < 1)
      sh = hi;
    else if (lo > 1)
      sw = 1 / lo;
    auto side = [&](double f) {
      return static_cast<int>(std::ceil(f * img_size / stride + pad)) * stride;
    };
    out.shapes.push_back({side(sh), side(sw)});
  }
  return out;
}

}  // namespace kestrel::yolo::data
