#include "yolo/common/smooth.h"

#include <cmath>
#include <cstdint>

#include "base/error.h"

namespace kestrel::yolo {

std::vector<double> smooth(const std::vector<double>& y, double f) {
  KESTREL_CHECK(!y.empty(), "smooth: empty curve");
  const int64_t nf = static_cast<int64_t>(std::nearbyint(y.size() * f * 2)) / 2 + 1;
  const int64_t half = nf / 2;
  std::vector<double> padded(half, y.front());
  padded.insert(padded.end(), y.begin(), y.end());
  padded.insert(padded.end(), half, y.back());
  const double w = 1.0 / static_cast<double>(nf);
  std::vector<double> out(padded.size() - nf + 1);
  for (size_t k = 0; k < out.size(); ++k) {
    double s = 0.0;
    for (int64_t t = 0; t < nf; ++t) s += padded[k + t] * w;
    out[k] = s;
  }
  return out;
}

}  // namespace kestrel::yolo
