// What a step-parity test reads of the reference's step (tests/scripts/*_reference.py `step`): the
// whole step file (live), or its summary (tests/scripts/step_summary.py: per tensor its sum, norm
// and largest magnitude as `.stats`, and 64 values spread from first to last as `.samples`), and
// Kestrel's tensors compared against either. Shared by the classifier's and segmentation's step
// parity tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/safetensors_tensors.h"
#include "engine/tensor.h"
#include "layers/module.h"
#include "yolo/model/weights_file.h"

namespace kestrel::testing {

inline std::vector<double> values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).to(DType::F64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

// The positions a summary keeps (tests/scripts/step_summary.py's summary_positions).
inline std::vector<size_t> summary_positions(size_t numel, size_t count = 64) {
  std::vector<size_t> out;
  if (numel <= count) {
    for (size_t i = 0; i < numel; ++i) out.push_back(i);
  } else {
    for (size_t k = 0; k < count; ++k) out.push_back(k * (numel - 1) / (count - 1));
  }
  return out;
}

// Kestrel's values of one tensor against the reference's: the worst |a - b| over the reference's
// largest magnitude, and how many elements differ by more than 1e-6 + 1e-5 |b|.
struct Difference {
  double scaled = 0;
  int64_t off = 0, elements = 0;
};

// What the reference holds of a tensor: all of it (a live step file) or its summary.
class ReferenceStep {
 public:
  ReferenceStep(const std::string& path, bool summary) : file_(yolo::read_weights_file(path)), summary_(summary) {}
  bool has(const std::string& name) const { return file_.contains(summary_ ? name + ".stats" : name); }
  Tensor tensor(const std::string& name) const { return safetensors_tensor(file_, name); }

  Difference compare(const std::string& name, const Tensor& kestrel) const {
    const std::vector<double> a = values(kestrel);
    Difference d;
    if (!summary_) return elementwise(a, values(tensor(name)));
    const std::vector<double> stats = values(tensor(name + ".stats")), samples = values(tensor(name + ".samples"));
    std::vector<double> picked;
    for (size_t i : summary_positions(a.size())) picked.push_back(a[i]);
    EXPECT_EQ(picked.size(), samples.size()) << name;
    d = elementwise(picked, samples, stats[2]);
    // The whole tensor through its norm.
    double sq = 0;
    for (double x : a) sq += x * x;
    d.scaled = std::max(d.scaled, std::abs(std::sqrt(sq) - stats[1]) / std::max(stats[1], 1e-30));
    return d;
  }

 protected:
  static Difference elementwise(const std::vector<double>& a, const std::vector<double>& b, double scale = -1) {
    Difference d;
    EXPECT_EQ(a.size(), b.size());
    double diff = 0;
    if (scale < 0) {
      scale = 0;
      for (double y : b) scale = std::max(scale, std::abs(y));
    }
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      diff = std::max(diff, std::abs(a[i] - b[i]));
      d.off += std::abs(a[i] - b[i]) > 1e-6 + 1e-5 * std::abs(b[i]);
    }
    d.elements = static_cast<int64_t>(std::min(a.size(), b.size()));
    d.scaled = scale > 0 ? diff / scale : diff;
    return d;
  }

  SafetensorsFile file_;
  bool summary_;
};

// The state entry's tensor (or its gradient) in the file's layout (OIHW convolutions).
inline Tensor file_layout(const layers::StateEntry& e, const Tensor& t) {
  return e.ohwi_conv_weight ? t.permute({0, 3, 1, 2}) : t;
}

}  // namespace kestrel::testing
