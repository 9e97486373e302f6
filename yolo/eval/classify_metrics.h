// Classification accuracy as the reference's classify/val.py computes it: each image's five
// highest logits (argsort descending), top-1 the share whose first is the label, top-5 the share
// with the label among them (among all classes when there are fewer than five); per class the
// same over that class's images; and the table val.py prints.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo {

class ClassifyMetrics {
 public:
  // logits: (batch, nc) float32 on any device; labels: the batch's classes.
  void add(const Tensor& logits, const std::vector<int64_t>& labels);
  // From host rows directly: `logits` holds labels.size() rows of nc values.
  void add(const float* logits, int64_t nc, const std::vector<int64_t>& labels);

  int64_t count() const { return static_cast<int64_t>(labels_.size()); }
  double top1() const { return mean(top1_, -1); }
  double top5() const { return mean(top5_, -1); }
  // Over the images of one class; NaN when it has none (as the reference's mean of nothing).
  double top1(int64_t cls) const { return mean(top1_, cls); }
  double top5(int64_t cls) const { return mean(top5_, cls); }
  int64_t count(int64_t cls) const;
  // The predicted class of every image added, in order.
  const std::vector<int64_t>& predictions() const { return predicted_; }

  // val.py's verbose table: the header, "all", then one row per class name
  // ("{name:>24}{images:>12}{top1:>12.3g}{top5:>12.3g}").
  std::string table(const std::vector<std::string>& names) const;

 private:
  double mean(const std::vector<uint8_t>& hits, int64_t cls) const;
  std::vector<int64_t> labels_, predicted_;
  std::vector<uint8_t> top1_, top5_;
};

// The indices of row's k largest values, largest first (ties: the lower index first).
std::vector<int64_t> top_k(const float* row, int64_t n, int64_t k);

// Python's format(x, '.3g'), as the reference's tables print numbers ("nan" for NaN).
std::string format_3g(double x);

}  // namespace kestrel::yolo
